# Dependencies come from Debian 12 packages (see scripts/install-deps.sh) or, on an air-gapped
# CUDA host, from a prefix of unpacked Debian packages given through CMAKE_PREFIX_PATH.

find_package(absl CONFIG REQUIRED)
find_package(Threads REQUIRED)

if(STEPSERVE_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
endif()

# The gRPC front end, protobuf and prometheus-cpp are needed only by the server.
find_package(Protobuf)
find_package(gRPC CONFIG)
find_package(prometheus-cpp CONFIG)
