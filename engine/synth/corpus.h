// The embedded training text for the synthetic vocabulary: English prose, a little code, numbers
// and a few CJK lines, written for this project.
#ifndef STEPSERVE_ENGINE_SYNTH_CORPUS_H_
#define STEPSERVE_ENGINE_SYNTH_CORPUS_H_

#include <string_view>

namespace stepserve::synth {

std::string_view TrainingCorpus();

}  // namespace stepserve::synth

#endif  // STEPSERVE_ENGINE_SYNTH_CORPUS_H_
