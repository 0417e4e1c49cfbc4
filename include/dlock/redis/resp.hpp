// RESP2 (the Redis serialization protocol): the reply value type, a sans-I/O
// incremental parser with hard limits, and request encoding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace dlock::redis {

/// What a RESP2 reply is. RESP2 has a null bulk string and a null array; both
/// are `null` here, because no Redis command gives them different meanings.
enum class kind : std::uint8_t {
  null,           ///< `$-1` or `*-1`
  simple_string,  ///< `+OK`
  error,          ///< `-ERR ...`; `str` holds the text after the dash
  integer,        ///< `:42`
  bulk_string,    ///< `$3\r\nfoo`
  array,          ///< `*2\r\n...`
};

/// One reply from the server: a tree of values.
struct value {
  kind type = kind::null;       ///< what the reply is, and so which field holds it
  std::string str;              ///< simple_string, error, bulk_string
  std::int64_t integer = 0;     ///< integer
  std::vector<value> elements;  ///< array

  bool is_null() const noexcept { return type == kind::null; }    ///< type is kind::null
  bool is_error() const noexcept { return type == kind::error; }  ///< type is kind::error
  bool is_array() const noexcept { return type == kind::array; }  ///< type is kind::array
  /// True for simple and bulk strings.
  bool is_string() const noexcept {
    return type == kind::simple_string || type == kind::bulk_string;
  }

  static value make_null() { return {}; }  ///< a null reply
  /// An integer reply holding `v`.
  static value make_integer(std::int64_t v) {
    value r;
    r.type = kind::integer;
    r.integer = v;
    return r;
  }
  /// A reply of type `k` (a bulk string unless told otherwise; simple_string
  /// or error also fit) whose `str` is `s`.
  static value make_string(std::string s, kind k = kind::bulk_string) {
    value r;
    r.type = k;
    r.str = std::move(s);
    return r;
  }

  /// Equal when every field is, elements compared deeply.
  friend bool operator==(const value&, const value&) = default;
};

/// Renders a value for messages and test output, e.g. `["message","ch","0"]`.
std::string to_string(const value& v);

/// Bounds that keep a hostile or broken peer from making the parser allocate
/// without limit or recurse without end. Each item has its bound, and one
/// top-level reply has two more, so that many items within their bounds
/// (arrays nested 16 deep of a million elements each) cannot add up.
struct parser_limits {
  std::size_t max_bulk_length = 64u << 20;  ///< bytes in one bulk string
  std::size_t max_elements = 1u << 20;      ///< elements in one array
  std::size_t max_depth = 16;               ///< arrays nested in arrays
  std::size_t max_line_length = 64u << 10;  ///< a simple string, error or header line
  std::size_t max_reply_bytes = 128u << 20;  ///< bytes of one top-level reply, headers included
  std::size_t max_reply_values = 1u << 20;   ///< values inside one top-level reply's arrays, at any depth
};

/// An incremental RESP2 parser. Feed it bytes as they arrive; it never reads
/// past one complete top-level reply per call, and keeps its partial state
/// between calls, so replies may be split across reads at any byte.
class parser {
 public:
  /// A parser that enforces `limits`.
  explicit parser(parser_limits limits = {}) noexcept : limits_(limits) {}

  /// What one parse() call came to.
  struct result {
    /// Bytes of the input that were used. The caller drops these from its
    /// buffer and passes the rest (plus newly read bytes) to the next call.
    /// Fewer than all may be used when the input ends inside a header line;
    /// those bytes must be offered again.
    std::size_t consumed = 0;
    /// A complete top-level reply, when one ended within `consumed`.
    std::optional<value> reply;
    /// Set on malformed input or a broken limit (protocol_error,
    /// reply_too_large, nesting_too_deep). The parser then stays failed
    /// until reset(): the stream cannot be resynchronised.
    std::error_code ec;
  };

  /// Parses from the start of `data`. Returns after one complete reply, when
  /// the input runs out, or on error.
  result parse(std::string_view data);

  /// Forgets any partial reply and any error (for a new connection).
  void reset() noexcept;

  const parser_limits& limits() const noexcept { return limits_; }  ///< the limits it enforces

 private:
  struct frame {
    value array;
    std::size_t remaining = 0;
  };

  // What one step of parse() came to.
  enum class step : std::uint8_t {
    more,      // the input ran out first
    opened,    // a bulk string or an array began: its contents come next
    complete,  // a value (or, from read_line, a line) is whole
    failed,    // malformed input or a broken limit; failed_ says which
  };

  step read_bulk_payload(std::string_view data, std::size_t& pos, std::optional<value>& done);
  step read_header(std::string_view data, std::size_t& pos, std::optional<value>& done);
  step read_line(std::string_view rest, std::string_view& line);
  step open_sized(char type, std::string_view size_text, std::optional<value>& done);
  step open_bulk(std::size_t length);
  step open_array(std::size_t count, std::optional<value>& done);
  std::optional<value> attach(value v);
  step fail(std::error_code ec);

  parser_limits limits_;
  std::vector<frame> stack_;          // open arrays, outermost first
  std::optional<value> bulk_;         // a bulk string whose payload is arriving
  std::size_t bulk_remaining_ = 0;    // payload bytes plus the final CRLF still due
  std::size_t reply_bytes_ = 0;       // bytes of the current top-level reply so far
  std::size_t reply_values_ = 0;      // values put into its arrays so far
  std::error_code failed_;
};

/// Appends one command as a RESP array of bulk strings to `out`.
void encode_command(std::string& out, std::initializer_list<std::string_view> args);
void encode_command(std::string& out, const std::vector<std::string>& args);
void encode_command(std::string& out, const std::vector<std::string_view>& args);
void encode_command(std::string& out, std::span<const std::string_view> args);

}  // namespace dlock::redis
