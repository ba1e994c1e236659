#include "engine/runtime/stop_matcher.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace stepserve::engine {
namespace {

struct Case {
  std::string name;
  std::vector<std::string> stops;
  std::vector<std::string> pieces;
  // What each Push releases, then Flush (when no match).
  std::vector<std::string> released;
  std::string flushed;
  std::string matched;  // empty: none
};

class StopMatcherTest : public ::testing::TestWithParam<Case> {};

TEST_P(StopMatcherTest, ReleasesExactlyTheTextBeforeTheStop) {
  const Case& c = GetParam();
  StopMatcher matcher(c.stops);
  ASSERT_EQ(c.pieces.size(), c.released.size());
  for (size_t i = 0; i < c.pieces.size(); ++i) {
    EXPECT_EQ(matcher.Push(c.pieces[i]), c.released[i]) << "piece " << i;
    if (matcher.matched().has_value()) {
      EXPECT_EQ(i + 1, c.pieces.size()) << "matched before the last piece";
      break;
    }
  }
  if (c.matched.empty()) {
    EXPECT_FALSE(matcher.matched().has_value());
    EXPECT_EQ(matcher.Flush(), c.flushed);
  } else {
    ASSERT_TRUE(matcher.matched().has_value());
    EXPECT_EQ(*matcher.matched(), c.matched);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, StopMatcherTest,
    ::testing::Values(
        Case{"NoStops", {}, {"ab", "cd"}, {"ab", "cd"}, "", ""},
        Case{"NoMatchNoPrefix", {"xyz"}, {"ab", "cd"}, {"ab", "cd"}, "", ""},
        Case{"WithinOnePiece", {"cd"}, {"abcde"}, {"ab"}, "", "cd"},
        Case{"AcrossPieces", {"END"}, {"foo E", "N", "D bar"}, {"foo ", "", ""}, "", "END"},
        Case{"HeldPrefixThenMismatch", {"END"}, {"foo EN", "x"}, {"foo ", "ENx"}, "", ""},
        Case{"HeldTailFlushed", {"END"}, {"foo EN"}, {"foo "}, "EN", ""},
        Case{"EarliestStopWins", {"cd", "bc"}, {"abcd"}, {"a"}, "", "bc"},
        Case{"LongestAtSamePosition", {"ab", "abc"}, {"xabc"}, {"x"}, "", "abc"},
        // "aab": after "aa" the tail "a" and "aa" are both prefixes; the longest is held.
        Case{"OverlappingPrefix", {"aab"}, {"aa", "ab"}, {"", "a"}, "", "aab"},
        Case{"RepeatedPrefixResolves", {"aab"}, {"aa", "a", "c"}, {"", "a", "aac"}, "", ""},
        Case{"Utf8Stop",
             {"\xC3\xA9t\xC3\xA9"},
             {"un \xC3\xA9", "t\xC3\xA9 !"},
             {"un ", ""},
             "",
             "\xC3\xA9t\xC3\xA9"},
        Case{"EmptyStopIgnored", {""}, {"abc"}, {"abc"}, "", ""}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace stepserve::engine
