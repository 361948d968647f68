# dtc_proto_library(NAME FILE.proto): a library of the protobuf-lite code
# generated from FILE.proto; its header is included as "<stem>.pb.h".
function(dtc_proto_library name proto)
  protobuf_generate_cpp(srcs hdrs ${proto})
  add_library(${name} ${srcs})
  target_include_directories(${name} PUBLIC ${CMAKE_CURRENT_BINARY_DIR})
  target_link_libraries(${name} PUBLIC protobuf::libprotobuf-lite)
  # Generated code: its warnings are not ours to fix.
  target_compile_options(${name} PRIVATE -w)
endfunction()
