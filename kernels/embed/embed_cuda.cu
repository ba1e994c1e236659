// EmbedCuda (embed_cuda.h): the row dequantizer of kernels/matmul in gather mode, F32 output.
#include "kernels/embed/embed_cuda.h"
#include "kernels/matmul/dequant_cuda.h"

namespace stepserve::kernels {

KernelStatus EmbedCuda(const EmbedCudaArgs& a, cudaStream_t stream) {
  if (a.table == nullptr || a.out == nullptr || a.n_ids < 0 || a.n_vocab <= 0 || a.dim <= 0) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.n_ids == 0) return KernelStatus::kOk;
  if (a.ids == nullptr) return KernelStatus::kInvalidArgument;
  DequantRowsArgs d;
  d.type = a.type;
  d.w = a.table;
  d.w_row_bytes = a.row_bytes;
  d.cols = a.dim;
  d.table_rows = a.n_vocab;
  d.row_ids = a.ids;
  d.rows = a.n_ids;
  d.output = DequantOutput::kF32;
  d.out = a.out;
  d.out_stride = a.out_stride;
  return DequantRowsCuda(d, stream);
}

}  // namespace stepserve::kernels
