/* ks_option_fields.h: the option table (include/ks_options.h) as the
 * initialiser lines of a feature's ks_option_field array, one per row in the
 * table's order (ks_proto.h). No include guard: the includer defines
 * KS_FIELD_tiers, KS_FIELD_flame and KS_FIELD_sample (KS_OPTION_FIELD for its
 * own struct, KS_OPTION_NO_FIELD for the others'), includes this file inside
 * the array's braces and undefines them. */
#define KS_OPTION(modes, key, type, min, max, def, by, field, doc) field,
#define KS_FIELD(feature, m, scale) KS_FIELD_##feature(m, scale)
#define KS_NO_FIELD KS_OPTION_NO_FIELD
#define KS_FORMAT(name, ext, writer, all)
#include "ks_options.h"
#undef KS_FORMAT
#undef KS_NO_FIELD
#undef KS_FIELD
#undef KS_OPTION
