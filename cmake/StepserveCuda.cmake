# CUDA and NCCL for the GPU engine. Included from the top level after the STEPSERVE_CUDA option.
#
# Works with CMake 3.25 (Debian 12) and 4.x (the CUDA host). The architecture is passed as an
# explicit -gencode rather than through CMAKE_CUDA_ARCHITECTURES, because the sm_90a form (needed
# for wgmma/setmaxnreg later) is spelled differently across CMake versions; one flag works on both.
# CMake 3.25 does not know nvcc's C++20 dialect flag, so it is supplied here when missing. The
# CUDA runtime is linked statically (CUDA::cudart_static) so binaries need only the driver.

set(STEPSERVE_CUDA_GENCODE "-gencode=arch=compute_90a,code=sm_90a" CACHE STRING
    "nvcc code-generation flags for every CUDA target (default: H100/H200, sm_90a)")

if(STEPSERVE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES OFF)  # our -gencode below decides
  endif()
  enable_language(CUDA)
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)  # CMake < 3.26 has no C++20 flag for nvcc
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
endif()

# stepserve_cuda_target(TARGET): the project's nvcc flags and the static CUDA runtime.
function(stepserve_cuda_target target)
  separate_arguments(_gencode UNIX_COMMAND "${STEPSERVE_CUDA_GENCODE}")
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:${_gencode} -Xptxas=-warn-spills>)
  target_link_options(${target} PUBLIC $<DEVICE_LINK:${_gencode}>)
  target_link_libraries(${target} PUBLIC CUDA::cudart_static)
endfunction()

# NCCL: on the CUDA host it comes from the Python nvidia-nccl package, which ships include/ and
# lib/libnccl.so.2 but no unversioned libnccl.so, so the versioned name is searched explicitly.
# Hint: -DNCCL_HOME=... or the NCCL_HOME environment variable
#   (python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])').
# Optional: the imported target stepserve::nccl exists only when both parts are found.
if(STEPSERVE_CUDA)
  set(NCCL_HOME "$ENV{NCCL_HOME}" CACHE PATH "Root of an NCCL install (include/, lib/)")
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS "${NCCL_HOME}" PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS "${NCCL_HOME}"
               PATH_SUFFIXES lib lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    add_library(stepserve::nccl SHARED IMPORTED)
    set_target_properties(stepserve::nccl PROPERTIES
      IMPORTED_LOCATION "${NCCL_LIBRARY}"
      IMPORTED_NO_SONAME OFF
      INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
    set(STEPSERVE_HAVE_NCCL ON)
    message(STATUS "stepserve: NCCL ${NCCL_LIBRARY}")
  else()
    set(STEPSERVE_HAVE_NCCL OFF)
    message(STATUS "stepserve: NCCL not found (set NCCL_HOME); multi-GPU parts are skipped")
  endif()
endif()
