// Value / Array / Metadata: conversions, ToString summaries, typed getters and their errors.
#include "engine/gguf/gguf_value.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stepserve::gguf {
namespace {

using ::testing::HasSubstr;

template <typename T>
Value V(T v) {
  return Value(Value::Storage(std::in_place_type<T>, v));
}

TEST(ValueTest, TypeMatchesVariantIndexForEveryType) {
  EXPECT_EQ(V<uint8_t>(1).type(), ValueType::kUint8);
  EXPECT_EQ(V<int8_t>(-1).type(), ValueType::kInt8);
  EXPECT_EQ(V<uint16_t>(1).type(), ValueType::kUint16);
  EXPECT_EQ(V<int16_t>(-1).type(), ValueType::kInt16);
  EXPECT_EQ(V<uint32_t>(1).type(), ValueType::kUint32);
  EXPECT_EQ(V<int32_t>(-1).type(), ValueType::kInt32);
  EXPECT_EQ(V<float>(1.5f).type(), ValueType::kFloat32);
  EXPECT_EQ(V<bool>(true).type(), ValueType::kBool);
  EXPECT_EQ(Value("x").type(), ValueType::kString);
  EXPECT_EQ(Value::Int32Array({1}).type(), ValueType::kArray);
  EXPECT_EQ(V<uint64_t>(1).type(), ValueType::kUint64);
  EXPECT_EQ(V<int64_t>(-1).type(), ValueType::kInt64);
  EXPECT_EQ(V<double>(0.25).type(), ValueType::kFloat64);
  EXPECT_EQ(ValueTypeName(ValueType::kUint32), "u32");
  EXPECT_EQ(ValueTypeName(ValueType::kString), "str");
  EXPECT_EQ(ValueTypeName(ValueType::kArray), "arr");
}

TEST(ValueTest, AsIntAndAsDouble) {
  EXPECT_EQ(V<int8_t>(-7).AsInt(), -7);
  EXPECT_EQ(V<uint32_t>(4000000000u).AsInt(), 4000000000);
  EXPECT_EQ(V<bool>(true).AsInt(), 1);
  EXPECT_EQ(V<uint64_t>(std::numeric_limits<uint64_t>::max()).AsInt(), std::nullopt);
  EXPECT_EQ(V<uint64_t>(std::numeric_limits<int64_t>::max()).AsInt(),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(V<float>(1.0f).AsInt(), std::nullopt);
  EXPECT_EQ(Value("3").AsInt(), std::nullopt);
  EXPECT_EQ(V<float>(0.5f).AsDouble(), 0.5);
  EXPECT_EQ(V<int16_t>(-3).AsDouble(), -3.0);
  EXPECT_EQ(Value("1.0").AsDouble(), std::nullopt);
}

TEST(ValueTest, ToStringSummarisesLongArraysAndStrings) {
  std::vector<int32_t> many(128896);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int32_t>(i + 1);
  EXPECT_EQ(Value::Int32Array(many).ToString(3), "[1, 2, 3, ... (128896 items)]");
  EXPECT_EQ(Value::Int32Array({1, 2}).ToString(3), "[1, 2]");
  EXPECT_EQ(Value::Int32Array({}).ToString(), "[]");
  EXPECT_EQ(Value::StringArray({"a b", "q\"\n"}).ToString(), "[\"a b\", \"q\\\"\\n\"]");
  EXPECT_EQ(Value::BoolArray({true, false}).ToString(), "[true, false]");
  EXPECT_EQ(V<float>(0.1f).ToString(), "0.1");
  EXPECT_EQ(V<int64_t>(-5).ToString(), "-5");
  EXPECT_EQ(V<uint8_t>(200).ToString(), "200");
  std::string long_string(1000, 'x');
  std::string shown = Value(Value::Storage(long_string)).ToString();
  EXPECT_LT(shown.size(), 300u);
  EXPECT_THAT(shown, HasSubstr("(1000 bytes)"));
  Value nested =
      Value::MakeArray(ValueType::kArray, {Value::Int32Array({1, 2}), Value::Int32Array({})});
  EXPECT_EQ(nested.ToString(), "[[1, 2], []]");
}

TEST(MetadataTest, SetReplacesInPlaceAndEraseKeepsOrder) {
  Metadata md;
  md.Set("a", V<uint32_t>(1));
  md.Set("b", "two");
  md.Set("c", V<float>(3.0f));
  md.Set("a", V<int32_t>(-1));
  ASSERT_EQ(md.size(), 3u);
  EXPECT_EQ(md.entries()[0].first, "a");
  EXPECT_EQ(md.entries()[0].second, V<int32_t>(-1));
  EXPECT_TRUE(md.Erase("b"));
  EXPECT_FALSE(md.Erase("b"));
  ASSERT_EQ(md.size(), 2u);
  EXPECT_EQ(md.entries()[1].first, "c");
  ASSERT_NE(md.Find("c"), nullptr);
  EXPECT_EQ(*md.Find("c"), V<float>(3.0f));
  EXPECT_FALSE(md.Contains("b"));
  md.Set("b", "again");
  EXPECT_EQ(md.entries()[2].first, "b");
  EXPECT_EQ(*md.GetString("b"), "again");
}

TEST(MetadataTest, TypedGettersConvertAndNameKeyAndTypeOnError) {
  Metadata md;
  md.Set("arch", "step35");
  md.Set("n", V<uint16_t>(48));
  md.Set("eps", V<float>(1e-5f));
  md.Set("flag", V<bool>(true));
  md.Set("heads", Value::Int32Array({64, 96}));
  md.Set("pattern", Value::BoolArray({true, false, true}));
  md.Set("u8s", Value::MakeArray(ValueType::kUint8, {V<uint8_t>(255)}));
  md.Set("scores", Value::Float32Array({0.5f, -1.0f}));
  md.Set("tokens", Value::StringArray({"a", "b"}));
  md.Set("big", V<uint64_t>(std::numeric_limits<uint64_t>::max()));

  EXPECT_EQ(*md.GetString("arch"), "step35");
  EXPECT_EQ(*md.GetInt("n"), 48);
  EXPECT_FLOAT_EQ(static_cast<float>(*md.GetFloat("eps")), 1e-5f);
  EXPECT_EQ(*md.GetFloat("n"), 48.0);
  EXPECT_TRUE(*md.GetBool("flag"));
  EXPECT_EQ(*md.GetIntArray("heads"), (std::vector<int64_t>{64, 96}));
  EXPECT_EQ(*md.GetIntArray("pattern"), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(*md.GetIntArray("u8s"), (std::vector<int64_t>{255}));
  EXPECT_EQ(*md.GetFloatArray("scores"), (std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(*md.GetFloatArray("heads"), (std::vector<double>{64, 96}));
  EXPECT_EQ(*md.GetStringArray("tokens"), (std::vector<std::string>{"a", "b"}));

  auto missing = md.GetInt("nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("'nope'"));
  auto wrong = md.GetInt("arch");
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("'arch'"));
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("str"));
  auto wrong_arr = md.GetStringArray("heads");
  ASSERT_FALSE(wrong_arr.ok());
  EXPECT_THAT(std::string(wrong_arr.status().message()), HasSubstr("arr[i32] of 2"));
  EXPECT_FALSE(md.GetBool("n").ok());
  EXPECT_FALSE(md.GetInt("flag").ok());
  EXPECT_FALSE(md.GetFloat("flag").ok());
  EXPECT_FALSE(md.GetIntArray("scores").ok());
  EXPECT_FALSE(md.GetIntArray("n").ok());
  auto big = md.GetInt("big");
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("'big'"));
}

TEST(MetadataTest, EqualityComparesOrderAndValues) {
  Metadata a, b;
  a.Set("x", V<int32_t>(1));
  a.Set("y", "s");
  b.Set("y", "s");
  b.Set("x", V<int32_t>(1));
  EXPECT_FALSE(a == b);
  Metadata c = a;
  EXPECT_TRUE(a == c);
  c.Set("x", V<int64_t>(1));
  EXPECT_FALSE(a == c);
}

}  // namespace
}  // namespace stepserve::gguf
