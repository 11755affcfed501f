proto_library = native.proto_library
