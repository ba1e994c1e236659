#include "engine/tokenizer/jinja_lexer.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace stepserve::jinja {

absl::Status ErrorAt(const Pos& pos, std::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrFormat("template line %d, column %d: %s", pos.line, pos.column, message));
}

namespace {

bool IsWs(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

class Lexer {
 public:
  Lexer(std::string source, const LexOptions& options)
      : src_(std::move(source)), options_(options) {}

  absl::StatusOr<std::vector<Token>> Run() {
    bool strip_next = false;
    while (pos_ < src_.size()) {
      size_t start = FindTagStart(pos_);
      std::string text = src_.substr(pos_, start - pos_);
      Pos text_pos = PosOf(pos_);
      if (strip_next) {
        size_t i = 0;
        while (i < text.size() && IsWs(text[i])) ++i;
        text.erase(0, i);
        strip_next = false;
      }
      if (start == src_.size()) {
        Emit(Token::Type::kText, std::move(text), text_pos);
        break;
      }
      char kind = src_[start + 1];
      char modifier = start + 2 < src_.size() ? src_[start + 2] : '\0';
      if (modifier == '-') {
        while (!text.empty() && IsWs(text.back())) text.pop_back();
      } else if (options_.lstrip_blocks && kind != '{' && modifier != '+') {
        size_t l = text.rfind('\n');
        l = l == std::string::npos ? 0 : l + 1;
        bool line_start = l > 0 || pos_ == 0 || src_[pos_ - 1] == '\n';
        if (line_start && text.find_first_not_of(" \t", l) == std::string::npos) text.erase(l);
      }
      Emit(Token::Type::kText, std::move(text), text_pos);
      size_t inner = start + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      if (kind == '#') {
        size_t end = src_.find("#}", inner);
        if (end == std::string::npos) return ErrorAt(PosOf(start), "unclosed comment");
        bool minus = end > inner && src_[end - 1] == '-';
        pos_ = end + 2;
        if (minus)
          strip_next = true;
        else if (options_.trim_blocks && pos_ < src_.size() && src_[pos_] == '\n')
          ++pos_;
        continue;
      }
      bool is_var = kind == '{';
      Emit(is_var ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "", PosOf(start));
      pos_ = inner;
      auto end_modifier = LexTag(is_var, PosOf(start));
      if (!end_modifier.ok()) return end_modifier.status();
      if (*end_modifier == '-') {
        strip_next = true;
      } else if (!is_var && options_.trim_blocks && *end_modifier != '+' && pos_ < src_.size() &&
                 src_[pos_] == '\n') {
        ++pos_;
      }
    }
    Emit(Token::Type::kEof, "", PosOf(src_.size()));
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return src_.size();
  }

  Pos PosOf(size_t offset) {
    // Incremental: offsets are requested in nondecreasing order almost always.
    if (offset < line_pos_offset_) {
      line_pos_offset_ = 0;
      line_ = 1;
      line_start_ = 0;
    }
    for (; line_pos_offset_ < offset && line_pos_offset_ < src_.size(); ++line_pos_offset_) {
      if (src_[line_pos_offset_] == '\n') {
        ++line_;
        line_start_ = line_pos_offset_ + 1;
      }
    }
    return Pos{line_, static_cast<int>(offset - line_start_) + 1};
  }

  void Emit(Token::Type type, std::string text, Pos pos) {
    if (type == Token::Type::kText && text.empty()) return;
    tokens_.push_back(Token{type, std::move(text), pos});
  }

  // Tokenizes up to and including the closing delimiter; returns its modifier ('-', '+' or ' ').
  absl::StatusOr<char> LexTag(bool is_var, Pos tag_pos) {
    int depth = 0;
    while (true) {
      while (pos_ < src_.size() && IsWs(src_[pos_])) ++pos_;
      if (pos_ >= src_.size()) return ErrorAt(tag_pos, is_var ? "unclosed '{{'" : "unclosed '{%'");
      std::string_view rest = std::string_view(src_).substr(pos_);
      const char* close = is_var ? "}}" : "%}";
      if (depth == 0 || !is_var) {
        for (char m : {'-', '+'}) {
          if (rest.size() >= 3 && rest[0] == m && rest.substr(1, 2) == close &&
              (m == '-' || !is_var)) {
            Emit(is_var ? Token::Type::kVarEnd : Token::Type::kBlockEnd, "", PosOf(pos_));
            pos_ += 3;
            return m;
          }
        }
        if (rest.substr(0, 2) == close) {
          Emit(is_var ? Token::Type::kVarEnd : Token::Type::kBlockEnd, "", PosOf(pos_));
          pos_ += 2;
          return ' ';
        }
      }
      Pos p = PosOf(pos_);
      char c = src_[pos_];
      if (isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t s = pos_;
        while (pos_ < src_.size() &&
               (isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) {
          ++pos_;
        }
        Emit(Token::Type::kName, src_.substr(s, pos_ - s), p);
      } else if (isdigit(static_cast<unsigned char>(c))) {
        size_t s = pos_;
        bool is_float = false;
        auto digits = [&] {
          while (pos_ < src_.size() &&
                 (isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) {
            ++pos_;
          }
        };
        digits();
        if (pos_ + 1 < src_.size() && src_[pos_] == '.' &&
            isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
          ++pos_;
          digits();
          is_float = true;
        }
        if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
          size_t save = pos_++;
          if (pos_ < src_.size() && (src_[pos_] == '+' || src_[pos_] == '-')) ++pos_;
          if (pos_ < src_.size() && isdigit(static_cast<unsigned char>(src_[pos_]))) {
            digits();
            is_float = true;
          } else {
            pos_ = save;
          }
        }
        std::string num;
        for (size_t i = s; i < pos_; ++i) {
          if (src_[i] != '_') num.push_back(src_[i]);
        }
        Emit(is_float ? Token::Type::kFloat : Token::Type::kInt, std::move(num), p);
      } else if (c == '\'' || c == '"') {
        auto s = LexString(c, p);
        if (!s.ok()) return s.status();
        Emit(Token::Type::kString, *std::move(s), p);
      } else {
        static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (std::string_view two : kTwo) {
          if (rest.substr(0, 2) == two) op = std::string(two);
        }
        if (op.empty()) {
          if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos) {
            return ErrorAt(p, absl::StrFormat("unexpected character '%c'", c));
          }
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        pos_ += op.size();
        Emit(Token::Type::kOp, std::move(op), p);
      }
    }
  }

  absl::StatusOr<std::string> LexString(char quote, Pos p) {
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= src_.size()) return ErrorAt(p, "unterminated string literal");
      char c = src_[pos_++];
      if (c == quote) return out;
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= src_.size()) return ErrorAt(p, "unterminated string literal");
      char e = src_[pos_++];
      auto hex = [&](int n) -> int64_t {
        if (pos_ + n > src_.size()) return -1;
        int64_t v = 0;
        for (int i = 0; i < n; ++i) {
          char h = src_[pos_ + i];
          int d = isdigit(static_cast<unsigned char>(h)) ? h - '0'
                  : (h >= 'a' && h <= 'f')               ? h - 'a' + 10
                  : (h >= 'A' && h <= 'F')               ? h - 'A' + 10
                                                         : -1;
          if (d < 0) return -1;
          v = v * 16 + d;
        }
        pos_ += n;
        return v;
      };
      switch (e) {
        case '\n':
          break;  // line continuation
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          int64_t v = hex(e == 'x' ? 2 : e == 'u' ? 4 : 8);
          if (v < 0 || v > 0x10FFFF) return ErrorAt(p, "invalid escape in string literal");
          AppendUtf8(out, static_cast<uint32_t>(v));
          break;
        }
        default:
          out.push_back('\\');
          out.push_back(e);
      }
    }
  }

  std::string src_;
  LexOptions options_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
  size_t line_pos_offset_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(std::string_view source, const LexOptions& options) {
  // jinja2 normalizes newlines to "\n" and drops one trailing newline (keep_trailing_newline).
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src.push_back(source[i]);
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src), options).Run();
}

}  // namespace stepserve::jinja
