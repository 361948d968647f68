# cmake -DPTX=<file.ptx> -DOUT=<file.cpp> -DFUNCTION=<name> -DHEADER=<include> -P EmbedPtx.cmake
# Writes OUT: `const char *dtc::runtime::cuda::FUNCTION()` returning PTX's
# text (a raw string literal, so the text goes in as it is).
file(READ "${PTX}" text)
get_filename_component(name "${PTX}" NAME)
file(WRITE "${OUT}.tmp" "// Generated from ${name} by cmake/EmbedPtx.cmake: do not edit.
#include \"${HEADER}\"

const char *dtc::runtime::cuda::${FUNCTION}() {
  return R\"dtc_ptx(${text})dtc_ptx\";
}
")
file(RENAME "${OUT}.tmp" "${OUT}")
