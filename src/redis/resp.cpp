// The RESP2 parser (incremental, bounded, no recursion on input depth) and
// request encoding.
#include <dlock/redis/resp.hpp>

#include <charconv>
#include <cstring>
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

// Bulk payloads and header lines alternate until a top-level reply is whole;
// no step recurses, whatever the nesting of the input.
parser::result parser::parse(std::string_view data) {
  result res;
  std::size_t pos = 0;
  while (!failed_) {
    std::optional<value> done;
    step s = bulk_ ? read_bulk_payload(data, pos, done) : read_header(data, pos, done);
    if (s == step::more) {
      res.consumed = pos;
      return res;
    }
    if (s != step::complete) continue;
    auto reply = attach(std::move(*done));
    // The reply's own bounds: the values in its arrays, counted by attach()
    // (the items' bounds do not add up to one); its bytes, as they are read.
    if (reply_values_ > limits_.max_reply_values) {
      fail(error::reply_too_large);
      break;
    }
    if (reply) {
      res.consumed = pos;
      res.reply = std::move(reply);
      reply_bytes_ = reply_values_ = 0;
      return res;
    }
  }
  res.ec = failed_;  // nothing counts as consumed: the stream is dead
  return res;
}

// A bulk payload, possibly spread over many reads: takes what is here, then
// the CRLF after it (which may arrive one byte at a time).
parser::step parser::read_bulk_payload(std::string_view data, std::size_t& pos, std::optional<value>& done) {
  std::size_t payload_left = bulk_remaining_ > 2 ? bulk_remaining_ - 2 : 0;
  std::size_t take = std::min(payload_left, data.size() - pos);
  bulk_->str.append(data.data() + pos, take);
  pos += take;
  bulk_remaining_ -= take;
  reply_bytes_ += take;
  if (bulk_remaining_ > 2) return step::more;
  while (bulk_remaining_ > 0 && pos < data.size()) {
    char want = bulk_remaining_ == 2 ? '\r' : '\n';
    if (data[pos] != want) return fail(error::protocol_error);
    ++pos;
    --bulk_remaining_;
    ++reply_bytes_;
  }
  if (bulk_remaining_ > 0) return step::more;
  done = std::move(*bulk_);
  bulk_.reset();
  return step::complete;
}

// A header line is only consumed once whole: a type byte, then the body.
parser::step parser::read_header(std::string_view data, std::size_t& pos, std::optional<value>& done) {
  std::string_view line;
  if (step s = read_line(data.substr(pos), line); s != step::complete) return s;
  pos += line.size() + 2;
  reply_bytes_ += line.size() + 2;
  if (reply_bytes_ > limits_.max_reply_bytes) return fail(error::reply_too_large);
  std::string_view body = line.substr(1);
  switch (line[0]) {
    case '+':
      done = value::make_string(std::string(body), kind::simple_string);
      return step::complete;
    case '-':
      done = value::make_string(std::string(body), kind::error);
      return step::complete;
    case ':': {
      std::int64_t n = 0;
      if (!parse_int(body, n)) return fail(error::protocol_error);
      done = value::make_integer(n);
      return step::complete;
    }
    case '$':
    case '*': return open_sized(line[0], body, done);
    default: return fail(error::protocol_error);
  }
}

// Finds the CRLF-terminated, non-empty line at the start of `rest`. The
// length limit applies to the line itself, wherever the input was cut.
parser::step parser::read_line(std::string_view rest, std::string_view& line) {
  auto cr = rest.find('\r');
  auto lf = rest.find('\n');
  if (lf != std::string_view::npos && (cr == std::string_view::npos || lf < cr))
    return fail(error::protocol_error);  // a bare LF
  if (cr == std::string_view::npos) {
    if (rest.size() > limits_.max_line_length) return fail(error::protocol_error);
    return step::more;
  }
  if (cr > limits_.max_line_length) return fail(error::protocol_error);
  if (cr + 1 >= rest.size()) return step::more;  // the LF is still to come
  if (rest[cr + 1] != '\n') return fail(error::protocol_error);
  if (cr == 0) return fail(error::protocol_error);
  line = rest.substr(0, cr);
  return step::complete;
}

// A bulk string or an array: its header gives its size, or -1 for null.
parser::step parser::open_sized(char type, std::string_view size_text, std::optional<value>& done) {
  std::int64_t n = 0;
  if (!parse_int(size_text, n) || n < -1) return fail(error::protocol_error);
  if (n == -1) {
    done = value::make_null();
    return step::complete;
  }
  const bool bulk = type == '$';
  if (static_cast<std::uint64_t>(n) > (bulk ? limits_.max_bulk_length : limits_.max_elements))
    return fail(error::reply_too_large);
  return bulk ? open_bulk(static_cast<std::size_t>(n)) : open_array(static_cast<std::size_t>(n), done);
}

parser::step parser::open_bulk(std::size_t length) {
  // Its payload and CRLF would take the reply past its bound: fail now,
  // before reading (or reserving) any of it.
  if (length + 2 > limits_.max_reply_bytes - std::min(reply_bytes_, limits_.max_reply_bytes))
    return fail(error::reply_too_large);
  bulk_ = value::make_string(std::string(), kind::bulk_string);
  bulk_->str.reserve(std::min<std::size_t>(length, 64u << 10));
  bulk_remaining_ = length + 2;
  return step::opened;
}

parser::step parser::open_array(std::size_t count, std::optional<value>& done) {
  if (count == 0) {
    value empty;
    empty.type = kind::array;
    done = std::move(empty);
    return step::complete;
  }
  if (stack_.size() >= limits_.max_depth) return fail(error::nesting_too_deep);
  frame f;
  f.array.type = kind::array;
  // Never trust a count for memory: grow as elements really arrive.
  f.array.elements.reserve(std::min<std::size_t>(count, 64));
  f.remaining = count;
  stack_.push_back(std::move(f));
  return step::opened;
}

// Attaches a finished value to the open arrays, closing any it completes;
// gives the top-level reply once none is left open.
std::optional<value> parser::attach(value v) {
  while (!stack_.empty()) {
    frame& top = stack_.back();
    top.array.elements.push_back(std::move(v));
    ++reply_values_;
    if (--top.remaining > 0) return std::nullopt;
    v = std::move(top.array);
    stack_.pop_back();
  }
  return v;
}

parser::step parser::fail(std::error_code ec) {
  failed_ = ec;
  return step::failed;
}

void parser::reset() noexcept {
  stack_.clear();
  bulk_.reset();
  bulk_remaining_ = 0;
  reply_bytes_ = reply_values_ = 0;
  failed_.clear();
}

namespace {

template <class Range>
void encode(std::string& out, const Range& args) {
  // The exact size first, then one pass writing into it: one allocation
  // and no per-piece bookkeeping (a lock's command is encoded per call).
  auto digits = [](std::size_t n) {
    std::size_t d = 1;
    while (n >= 10) {
      n /= 10;
      ++d;
    }
    return d;
  };
  std::size_t need = 3 + digits(std::size(args));
  for (std::string_view a : args) need += 5 + digits(a.size()) + a.size();
  const std::size_t at = out.size();
  out.resize(at + need);
  char* p = out.data() + at;
  auto header = [&](char type, std::size_t n) {
    *p++ = type;
    p = std::to_chars(p, p + 20, n).ptr;
    *p++ = '\r';
    *p++ = '\n';
  };
  header('*', std::size(args));
  for (std::string_view a : args) {
    header('$', a.size());
    if (!a.empty()) std::memcpy(p, a.data(), a.size());
    p += a.size();
    *p++ = '\r';
    *p++ = '\n';
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
void encode_command(std::string& out, std::span<const std::string_view> args) { encode(out, args); }

}  // namespace dlock::redis
