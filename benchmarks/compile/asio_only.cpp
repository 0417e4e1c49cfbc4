// The yardstick of `./dev bench compile`: a file that includes Asio alone
// and runs an io_context, as a program that uses Asio at all must.
#include <boost/asio.hpp>

int main() {
  boost::asio::io_context io;
  io.run();
}
