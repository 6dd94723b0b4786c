"""Generates C++ protobuf and gRPC code with the system protoc and plugin.

Bazel 4's proto rules would fetch protobuf from the network; this macro runs
Debian's /usr/bin/protoc and /usr/bin/grpc_cpp_plugin in a genrule instead.
"""

load("@rules_cc//cc:defs.bzl", "cc_library")

def cc_grpc_proto_library(name, src, visibility = None):
    """Declares `name`: a cc_library with the messages and gRPC stubs of `src`.

    Args:
      name: the cc_library's name.
      src: one .proto file in this package; it may import only well-known types.
      visibility: visibility of the cc_library.
    """
    base = src[:-len(".proto")]
    pkg = native.package_name()
    outs = [base + ext for ext in [".pb.h", ".pb.cc", ".grpc.pb.h", ".grpc.pb.cc"]]
    native.genrule(
        name = name + "_gen",
        srcs = [src],
        outs = outs,
        cmd = ("/usr/bin/protoc --proto_path=. " +
               "--cpp_out=$(GENDIR) --grpc_out=$(GENDIR) " +
               "--plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin " +
               "$(location " + src + ")"),
        visibility = ["//visibility:private"],
    )
    cc_library(
        name = name,
        srcs = [base + ".pb.cc", base + ".grpc.pb.cc"],
        hdrs = [base + ".pb.h", base + ".grpc.pb.h"],
        deps = [
            "//bazel:grpc",
            "//bazel:protobuf",
        ],
        visibility = visibility,
    )
