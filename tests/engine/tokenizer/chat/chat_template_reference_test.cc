// Renders every conversation in cases.json with every template in the shared reference folder,
// both with python3-jinja2 (render_reference.py, run now) and with our interpreter, and requires
// byte-identical output, or an error from both.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/jinja_template.h"
#include "gtest/gtest.h"

namespace stepserve {
namespace {

constexpr long kNow = 1700000000;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string TemplateDir() { return std::string(STEPSERVE_SHARED_DIR) + "/ref/templates"; }

std::string RunReference() {
  std::string cmd = std::string(STEPSERVE_PYTHON3) + " " + CHAT_TEST_DIR + "/render_reference.py " +
                    TemplateDir() + " " + CHAT_TEST_DIR + "/cases.json " + std::to_string(kNow);
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return "";
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  if (pclose(p) != 0) return "";
  return out;
}

TEST(ChatTemplateReference, AllTemplatesMatchPythonJinja2) {
  ASSERT_TRUE(std::filesystem::exists(TemplateDir())) << TemplateDir();
  std::string ref_text = RunReference();
  ASSERT_FALSE(ref_text.empty()) << "python3-jinja2 reference renderer failed";
  auto ref = jinja::ParseJson(ref_text);
  ASSERT_TRUE(ref.ok()) << ref.status();
  auto cases = jinja::ParseJson(ReadFile(std::string(CHAT_TEST_DIR) + "/cases.json"));
  ASSERT_TRUE(cases.ok()) << cases.status();
  int compared = 0, errors = 0;
  for (const auto& [file, per_case] : ref->object().items()) {
    auto tmpl = jinja::JinjaTemplate::Parse(ReadFile(TemplateDir() + "/" + file));
    ASSERT_TRUE(tmpl.ok()) << file << ": " << tmpl.status();
    for (const jinja::Value& c : cases->array()) {
      const std::string& name = c.object().Find("name")->str();
      const jinja::Value* expected = per_case.object().Find(name);
      ASSERT_NE(expected, nullptr);
      jinja::RenderOptions options;
      options.now = kNow;
      auto got = tmpl->Render(c.object().Find("context")->object(), options);
      if (const jinja::Value* text = expected->object().Find("text")) {
        ASSERT_TRUE(got.ok()) << file << " / " << name << ": " << got.status();
        EXPECT_EQ(*got, text->str()) << file << " / " << name;
        ++compared;
      } else {
        EXPECT_FALSE(got.ok()) << file << " / " << name << " should fail like jinja2 ("
                               << expected->object().Find("error")->str() << ")";
        ++errors;
      }
    }
  }
  EXPECT_GE(compared, 100);
  EXPECT_GT(errors, 0);
}

// The ChatRequest API maps to the same context as the JSON cases.
TEST(ChatTemplateReference, ChatRequestRendersStepTemplate) {
  auto tmpl = ChatTemplate::Create(ReadFile(TemplateDir() + "/StepFun3.5-Flash.jinja"));
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  ChatRequest req;
  req.bos_token = "<s>";
  ChatMessage user;
  user.role = "user";
  user.content = "  Hi  ";
  req.messages.push_back(user);
  ChatMessage asst;
  asst.role = "assistant";
  asst.content = "Calling.";
  asst.reasoning_content = "why";
  ChatToolCall call;
  call.name = "f";
  call.arguments = *jinja::ParseJson(R"({"a": 1, "b": "x", "c": [1, "y"]})");
  asst.tool_calls.push_back(call);
  req.messages.push_back(asst);
  auto out = tmpl->Render(req);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "<s><|im_start|>user\n  Hi  <|im_end|>\n<|im_start|>assistant\n<think>\nwhy\n"
            "</think>\nCalling.<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n"
            "<parameter=b>\nx\n</parameter>\n<parameter=c>\n[1, \"y\"]\n</parameter>\n"
            "</function>\n</tool_call><|im_end|>\n<|im_start|>assistant\n<think>\n");
  req.trim_message_content = true;
  out = tmpl->Render(req);
  ASSERT_TRUE(out.ok());
  EXPECT_NE(out->find("user\nHi<|im_end|>"), std::string::npos);
}

}  // namespace
}  // namespace stepserve
