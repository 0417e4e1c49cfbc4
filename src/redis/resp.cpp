// The RESP2 parser (incremental, bounded, no recursion on input depth) and
// request encoding.
#include <dlock/redis/resp.hpp>

#include <charconv>
#include <cstdio>

#include <dlock/error.hpp>

namespace dlock::redis {

namespace {

// Parses a signed decimal that fills the whole view.
bool parse_int(std::string_view text, std::int64_t& out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

parser::result parser::parse(std::string_view data) {
  result res;
  if (failed_) {
    res.ec = failed_;
    return res;
  }
  auto fail = [&](error e) {
    failed_ = make_error_code(e);
    res.ec = failed_;
    return res;
  };
  std::size_t pos = 0;

  for (;;) {
    std::optional<value> done;  // a value just completed, to attach to its parent

    if (bulk_) {
      // A bulk payload, possibly spread over many reads: take what is here.
      std::size_t payload_left = bulk_remaining_ > 2 ? bulk_remaining_ - 2 : 0;
      std::size_t take = std::min(payload_left, data.size() - pos);
      bulk_->str.append(data.data() + pos, take);
      pos += take;
      bulk_remaining_ -= take;
      if (bulk_remaining_ > 2) {
        res.consumed = pos;
        return res;
      }
      // The CRLF after the payload (it may arrive one byte at a time).
      while (bulk_remaining_ > 0 && pos < data.size()) {
        char want = bulk_remaining_ == 2 ? '\r' : '\n';
        if (data[pos] != want) return fail(error::protocol_error);
        ++pos;
        --bulk_remaining_;
      }
      if (bulk_remaining_ > 0) {
        res.consumed = pos;
        return res;
      }
      done = std::move(*bulk_);
      bulk_.reset();
    } else {
      // A header line: only consumed once whole.
      auto rest = data.substr(pos);
      auto cr = rest.find('\r');
      auto lf = rest.find('\n');
      if (lf != std::string_view::npos && (cr == std::string_view::npos || lf < cr))
        return fail(error::protocol_error);  // a bare LF
      // The limit applies to the line itself, wherever the input was cut.
      if (cr == std::string_view::npos) {
        if (rest.size() > limits_.max_line_length) return fail(error::protocol_error);
        res.consumed = pos;
        return res;  // need more
      }
      if (cr > limits_.max_line_length) return fail(error::protocol_error);
      if (cr + 1 >= rest.size()) {
        res.consumed = pos;
        return res;  // the LF is still to come
      }
      if (rest[cr + 1] != '\n') return fail(error::protocol_error);
      if (cr == 0) return fail(error::protocol_error);
      char type = rest[0];
      std::string_view body = rest.substr(1, cr - 1);
      pos += cr + 2;

      switch (type) {
        case '+':
          done = value::make_string(std::string(body), kind::simple_string);
          break;
        case '-':
          done = value::make_string(std::string(body), kind::error);
          break;
        case ':': {
          std::int64_t n = 0;
          if (!parse_int(body, n)) return fail(error::protocol_error);
          done = value::make_integer(n);
          break;
        }
        case '$': {
          std::int64_t n = 0;
          if (!parse_int(body, n) || n < -1) return fail(error::protocol_error);
          if (n == -1) {
            done = value::make_null();
            break;
          }
          if (static_cast<std::uint64_t>(n) > limits_.max_bulk_length) return fail(error::reply_too_large);
          bulk_ = value::make_string(std::string(), kind::bulk_string);
          bulk_->str.reserve(std::min<std::size_t>(static_cast<std::size_t>(n), 64u << 10));
          bulk_remaining_ = static_cast<std::size_t>(n) + 2;
          continue;
        }
        case '*': {
          std::int64_t n = 0;
          if (!parse_int(body, n) || n < -1) return fail(error::protocol_error);
          if (n == -1) {
            done = value::make_null();
            break;
          }
          if (static_cast<std::uint64_t>(n) > limits_.max_elements) return fail(error::reply_too_large);
          if (n == 0) {
            value empty;
            empty.type = kind::array;
            done = std::move(empty);
            break;
          }
          if (stack_.size() >= limits_.max_depth) return fail(error::nesting_too_deep);
          frame f;
          f.array.type = kind::array;
          // Never trust a count for memory: grow as elements really arrive.
          f.array.elements.reserve(std::min<std::size_t>(static_cast<std::size_t>(n), 64));
          f.remaining = static_cast<std::size_t>(n);
          stack_.push_back(std::move(f));
          continue;
        }
        default:
          return fail(error::protocol_error);
      }
    }

    // Attach the finished value to the open arrays, closing any it completes.
    while (!stack_.empty()) {
      frame& top = stack_.back();
      top.array.elements.push_back(std::move(*done));
      if (--top.remaining > 0) {
        done.reset();
        break;
      }
      done = std::move(top.array);
      stack_.pop_back();
    }
    if (done) {
      res.consumed = pos;
      res.reply = std::move(done);
      return res;
    }
  }
}

void parser::reset() noexcept {
  stack_.clear();
  bulk_.reset();
  bulk_remaining_ = 0;
  failed_.clear();
}

namespace {

template <class Range>
void encode(std::string& out, const Range& args) {
  char buf[32];
  auto header = [&](char type, std::size_t n) {
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, n);
    out.push_back(type);
    out.append(buf, end);
    out.append("\r\n");
  };
  header('*', std::size(args));
  for (std::string_view a : args) {
    header('$', a.size());
    out.append(a);
    out.append("\r\n");
  }
}

void render(std::string& out, const value& v) {
  switch (v.type) {
    case kind::null: out += "nil"; return;
    case kind::integer: out += std::to_string(v.integer); return;
    case kind::simple_string: out += v.str; return;
    case kind::error: out += "(error) " + v.str; return;
    case kind::bulk_string:
      out.push_back('"');
      for (unsigned char c : v.str) {
        if (c == '"' || c == '\\') {
          out.push_back('\\');
          out.push_back(static_cast<char>(c));
        } else if (c == '\r') {
          out += "\\r";
        } else if (c == '\n') {
          out += "\\n";
        } else if (c < 0x20 || c >= 0x7f) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "\\x%02x", c);
          out += hex;
        } else {
          out.push_back(static_cast<char>(c));
        }
      }
      out.push_back('"');
      return;
    case kind::array:
      out.push_back('[');
      for (std::size_t i = 0; i < v.elements.size(); ++i) {
        if (i) out.push_back(',');
        render(out, v.elements[i]);
      }
      out.push_back(']');
      return;
  }
}

}  // namespace

// Renders simple strings bare, errors as "(error) text", bulk strings quoted
// with escapes, arrays in brackets: ["message","ch","0"].
std::string to_string(const value& v) {
  std::string out;
  render(out, v);
  return out;
}

void encode_command(std::string& out, std::initializer_list<std::string_view> args) { encode(out, args); }
void encode_command(std::string& out, const std::vector<std::string>& args) { encode(out, args); }
void encode_command(std::string& out, const std::vector<std::string_view>& args) { encode(out, args); }

}  // namespace dlock::redis
