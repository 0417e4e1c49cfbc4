/* What CMake's generate_export_header makes for a static build of Google
 * Benchmark: every export annotation is empty. */
#ifndef BENCHMARK_EXPORT_H
#define BENCHMARK_EXPORT_H
#define BENCHMARK_EXPORT
#define BENCHMARK_NO_EXPORT
#define BENCHMARK_DEPRECATED __attribute__((__deprecated__))
#define BENCHMARK_DEPRECATED_EXPORT BENCHMARK_EXPORT BENCHMARK_DEPRECATED
#define BENCHMARK_DEPRECATED_NO_EXPORT BENCHMARK_NO_EXPORT BENCHMARK_DEPRECATED
#endif
