# Writes a text file as a NUL-terminated C char array (for #include), so a
# source file in another language is compiled into the binary:
#   cmake -DIN=file.py -DOUT=file.inc -DNAME=c_identifier -P embed_text.cmake
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n    " bytes "${bytes}")
file(WRITE "${OUT}.tmp"
     "/* Generated from ${IN} by cmake/embed_text.cmake. */\n"
     "static const char ${NAME}[] = {\n    ${bytes}0x00\n};\n")
file(RENAME "${OUT}.tmp" "${OUT}")
