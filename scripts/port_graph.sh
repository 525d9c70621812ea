#!/bin/sh
# scripts/port_graph.sh: how port/'s parts depend on each other, from the sources alone.
#
#   scripts/port_graph.sh           the folders' include graph, then every circle
#
#   folders   A -> B (N): N #include lines of folder A of port name a header of B (a header
#             named without a folder is its own folder's, or include/'s when it is there)
#   circles   of the folders (self-includes left out), and of the .c files: A.c -> B.c
#             when A.c calls a ks_* function B.c defines (a definition: a line in
#             column 0 naming it before its `('); each circle as tsort(1) reports it
# Lines per folder: wc -l port/FOLDER/*.[ch]. Exit status 0 whatever it finds.
cd "$(dirname "$0")/.." || exit 1
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
# tsort's loop reports as "  circle: a b c", or "  none".
circles() {
  awk '/input contains a loop/ { if (c != "") print "  circle:" c; c = ""; n++; next }
       { sub(/^tsort: /, ""); c = c " " $0 }
       END { if (c != "") print "  circle:" c; if (n == 0) print "  none" }'
}

for f in port/*/*.[ch]; do
  d=${f#port/}; d=${d%%/*}
  sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f" | while read -r h; do
    case $h in
      */*) echo "$d ${h%%/*}" ;;
      *) if [ -e "include/$h" ]; then echo "$d include"; else echo "$d $d"; fi ;;
    esac
  done
done | sort | uniq -c | awk '$2 != $3 { print "  " $2 " -> " $3 " (" $1 ")" }' > "$tmp/folders"
echo "folders (#include lines):"
cat "$tmp/folders"
echo "folder circles:"
awk '{ print $1, $3 }' "$tmp/folders" | tsort 2>&1 >/dev/null | circles

# Functions each .c defines, then the edges of the files that call them.
for f in port/*/*.c port/*.c; do
  sed -n 's/^[a-z][^(=;]*[ *]\(ks_[a-z0-9_]*\)(.*/\1/p' "$f" | sed "s|\$| $f|"
done | sort -u > "$tmp/defs"
for f in port/*/*.c port/*.c; do
  grep -o 'ks_[a-z0-9_]*(' "$f" | tr -d '(' | sort -u | sed "s|^|$f |"
done | sort -k2 > "$tmp/uses"
join -1 2 -2 1 "$tmp/uses" "$tmp/defs" | awk '$2 != $3 { print $2, $3 }' | sort -u > "$tmp/files"
echo "file circles (calls between .c files):"
tsort "$tmp/files" 2>&1 >/dev/null | circles
