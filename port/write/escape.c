/* escape.c: the escapes of each format: what breaks a format in a name
 * (names are raw UTF-8, port/callpath/names.c) written so that it does not.
 * A name may still hold bytes that are not UTF-8 (a process name or initial call
 * the sink was sent, a name cut at a buffer's end): the JSON and the SVG write
 * U+FFFD for each such byte, the folded stacks and perf script %XX, so that every
 * file is UTF-8 (JSON and XML parsers refuse anything else). */
#include <stdio.h>
#include <string.h>

#include "ks_write.h"

/* The length of the UTF-8 sequence s starts with (RFC 3629: no overlong form, no
 * surrogate, nothing past U+10FFFF), 0 when it is none. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  size_t len, k;
  uint32_t cp;

  if (c < 0x80)
    return 1;
  if (c >= 0xc2 && c <= 0xdf)
    len = 2, cp = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef)
    len = 3, cp = c & 0x0f;
  else if (c >= 0xf0 && c <= 0xf4)
    len = 4, cp = c & 0x07;
  else
    return 0;
  if (n < len)
    return 0;
  for (k = 1; k < len; k++) {
    if ((s[k] & 0xc0) != 0x80)
      return 0;
    cp = cp << 6 | (s[k] & 0x3f);
  }
  if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
      (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
    return 0;
  return len;
}

#define REPLACEMENT "\xef\xbf\xbd"   /* U+FFFD */

/* The character s starts with, as it is (ASCII, or a whole UTF-8 sequence),
 * or U+FFFD for a byte that starts none: the bytes it took. */
static size_t put_utf8(FILE *f, const unsigned char *s, size_t n) {
  size_t len;

  if (s[0] < 0x80) {
    putc(s[0], f);
    return 1;
  }
  if ((len = utf8_len(s, n)) > 0) {
    fwrite(s, 1, len, f);
    return len;
  }
  fputs(REPLACEMENT, f);
  return 1;
}

/*
 * Folded stacks and perf script: `;` separates frames, spaces end them and
 * a leading `(` is a process name to Firefox's importer. Those, `%`, control
 * bytes and bytes that are not UTF-8 become %XX, so the escape can be undone.
 * A character is written whole or, at the end of out, not at all.
 */
size_t ks_write_escape_folded(const char *s, size_t n, char *out, size_t cap) {
  static const char hex[] = "0123456789ABCDEF";
  const unsigned char *u = (const unsigned char *)s;
  size_t i, o = 0, len;

  if (cap == 0)
    return 0;
  for (i = 0; i < n; i += len) {
    unsigned char ch = u[i];
    int esc = ch == ';' || ch == ' ' || ch == '%' || ch < 0x20 || ch == 0x7f ||
              (i == 0 && ch == '(');
    if ((len = utf8_len(u + i, n - i)) == 0) {
      esc = 1;
      len = 1;
    }
    if (o + (esc ? 3 : len) >= cap)
      break;
    if (esc) {
      out[o++] = '%';
      out[o++] = hex[ch >> 4];
      out[o++] = hex[ch & 15];
    } else {
      memcpy(out + o, u + i, len);
      o += len;
    }
  }
  out[o] = 0;
  return o;
}

void ks_write_put_json(FILE *f, const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t i, len;

  putc('"', f);
  for (i = 0; i < n; i += len) {
    unsigned char ch = u[i];
    len = 1;
    if (ch == '"' || ch == '\\') {
      putc('\\', f);
      putc(ch, f);
    } else if (ch < 0x20 || ch == 0x7f) {
      fprintf(f, "\\u%04x", ch);
    } else if (ch < 0x80) {
      putc(ch, f);
    } else if ((len = utf8_len(u + i, n - i)) > 0) {
      fwrite(u + i, 1, len, f);
    } else {
      fputs(REPLACEMENT, f);
      len = 1;
    }
  }
  putc('"', f);
}

/* XML 1.0 has no place for control characters: they become U+FFFD, as bytes that
 * are not UTF-8 do. */
void ks_write_put_xml(FILE *f, const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t i, len;

  for (i = 0; i < n; i += len) {
    unsigned char ch = u[i];
    len = 1;
    switch (ch) {
    case '&': fputs("&amp;", f); break;
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '"': fputs("&quot;", f); break;
    case '\'': fputs("&#39;", f); break;
    default:
      if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
        fputs(REPLACEMENT, f);
      else
        len = put_utf8(f, u + i, n - i);
    }
  }
}

/* A callgrind name, to the end of its line: control characters (line breaks
 * among them) and bytes that are not UTF-8 become U+FFFD, a leading `(' (it
 * would read as a compressed name's id) `[', and the empty name (the empty
 * atom, a module's) is written '' as Erlang writes it. */
void ks_write_put_line(FILE *f, const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t i, len;

  if (n == 0)
    fputs("''", f);
  for (i = 0; i < n; i += len) {
    unsigned char ch = u[i];
    len = 1;
    if (ch < 0x20 || ch == 0x7f)
      fputs(REPLACEMENT, f);
    else if (i == 0 && ch == '(')
      putc('[', f);
    else
      len = put_utf8(f, u + i, n - i);
  }
}
