# Finds every external dependency. A missing one stops configuration with a
# single line naming the Debian package to install (scripts/install-deps.sh
# installs them all).
find_package(PkgConfig QUIET)

macro(kvindex_require found package)
  if(NOT ${found})
    message(FATAL_ERROR "kvindex: missing dependency; install the Debian package '${package}' "
                        "(or run scripts/install-deps.sh)")
  endif()
endmacro()

if(NOT PkgConfig_FOUND)
  kvindex_require(PkgConfig_FOUND pkg-config)
endif()

find_package(Threads REQUIRED)

# TLS for the HTTP client (kvindex-router --bootstrap-from https://).
find_package(OpenSSL QUIET)
kvindex_require(OPENSSL_FOUND libssl-dev)

find_package(absl CONFIG QUIET)
kvindex_require(absl_FOUND libabsl-dev)

find_package(msgpack CONFIG QUIET)
if(NOT TARGET msgpackc-cxx)
  kvindex_require(FALSE libmsgpack-cxx-dev)
endif()

find_package(cppzmq CONFIG QUIET)
kvindex_require(cppzmq_FOUND cppzmq-dev)

# Debian's cnats CMake config references a static library that is not shipped;
# pkg-config is reliable.
pkg_check_modules(NATS QUIET IMPORTED_TARGET libnats)
kvindex_require(NATS_FOUND libnats-dev)

pkg_check_modules(XXHASH QUIET IMPORTED_TARGET libxxhash)
kvindex_require(XXHASH_FOUND libxxhash-dev)

find_package(RocksDB CONFIG QUIET)
kvindex_require(RocksDB_FOUND librocksdb-dev)

find_package(prometheus-cpp CONFIG QUIET)
kvindex_require(prometheus-cpp_FOUND prometheus-cpp-dev)

find_package(CLI11 CONFIG QUIET)
kvindex_require(CLI11_FOUND libcli11-dev)

find_package(simdjson CONFIG QUIET)
kvindex_require(simdjson_FOUND libsimdjson-dev)

find_package(nlohmann_json CONFIG QUIET)
kvindex_require(nlohmann_json_FOUND nlohmann-json3-dev)

find_package(yaml-cpp CONFIG QUIET)
kvindex_require(yaml-cpp_FOUND libyaml-cpp-dev)

find_package(spdlog CONFIG QUIET)
kvindex_require(spdlog_FOUND libspdlog-dev)

find_library(CIVETWEB_LIBRARY NAMES civetweb)
find_path(CIVETWEB_INCLUDE_DIR NAMES civetweb.h)
if(NOT CIVETWEB_LIBRARY OR NOT CIVETWEB_INCLUDE_DIR)
  kvindex_require(FALSE libcivetweb-dev)
endif()
add_library(kvindex_civetweb INTERFACE)
target_link_libraries(kvindex_civetweb INTERFACE ${CIVETWEB_LIBRARY})
target_include_directories(kvindex_civetweb SYSTEM INTERFACE ${CIVETWEB_INCLUDE_DIR})

# Boost.Beast/Asio (header-only) for the event-loop HTTP server.
find_package(Boost 1.74 QUIET)
kvindex_require(Boost_FOUND libboost-dev)

if(KVINDEX_BUILD_TESTS)
  find_package(GTest CONFIG QUIET)
  kvindex_require(GTest_FOUND "libgtest-dev libgmock-dev")
endif()
find_package(benchmark CONFIG QUIET)
kvindex_require(benchmark_FOUND libbenchmark-dev)
