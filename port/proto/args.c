/* args.c: pieces of a command's arguments the handlers of several features decode. */
#include "ks_proto.h"

int ks_arg_bin(const char *b, int *idx, char *out, size_t cap, size_t *n) {
  int type, size;
  long got;

  if (ei_get_type(b, idx, &type, &size) != 0 || type != ERL_BINARY_EXT || size < 0 ||
      (size_t)size >= cap || ei_decode_binary(b, idx, out, &got) != 0)
    return KS_EINVAL;
  out[got] = 0;
  *n = (size_t)got;
  return KS_OK;
}
