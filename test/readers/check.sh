#!/bin/sh
# check.sh DIR annotate|flamegraph: the files of test/readers/capture.escript
# (DIR/a, DIR/b) fed to the formats' own readers, warnings on. Any output on
# stderr, a non-zero exit or a line the reader could not take fails the check.
#   annotate    callgrind_annotate (valgrind's) on each callgrind.out.*, flat and
#               with --inclusive=yes --tree=both: its header shows the capture
#               (cmd:) and the correction (desc:); each .meta.json and
#               .speedscope.json parsed as strict JSON (perl's JSON::PP), the meta
#               file's formats, total_us (the sum of the folded counts) and
#               correction checked.
#   flamegraph  FlameGraph's scripts under perl -w: flamegraph.pl on each .folded
#               (--countname=calls on .calls.folded), difffolded.pl on a and b,
#               stackcollapse-perf.pl on each .perf (its stacks then drawn too).
#               They are no Debian package: FLAMEGRAPH_DIR names a FlameGraph
#               checkout, else they are looked for on PATH.
set -eu
dir=$1
what=$2
fails=0
err=$dir/stderr

fail() {
  echo "check-readers: FAILED: $*"
  fails=$((fails + 1))
}

# file_of SUB FORMAT: the path of FORMAT's file of capture SUB (capture.escript's list).
file_of() {
  awk -v f="$2" '$1 == f { print $2 }' "$dir/$1/files"
}

# run NAME CMD...: CMD's stdout to $dir/out; fails on a non-zero exit or any stderr.
run() {
  name=$1
  shift
  if ! "$@" > "$dir/out" 2> "$err"; then
    fail "$name exited non-zero: $(head -c 2000 "$err")"
  elif [ -s "$err" ]; then
    fail "$name warned: $(head -c 2000 "$err")"
  else
    echo "  ok: $name"
  fi
}

# Every line of a folded file (or difffolded.pl's output, COUNTS counts) is
# "frames count": a count the reader parsed.
lines_ok() {
  awk -v n="$2" '{ if (NF < n + 1) bad++; for (i = NF - n + 1; i <= NF; i++) if ($i !~ /^[0-9]+$/) bad++ }
    END { exit bad > 0 || NR == 0 }' "$1"
}

annotate() {
  for cg in $(file_of a callgrind) $(file_of b callgrind); do
    run "callgrind_annotate $(basename "$cg")" callgrind_annotate --auto=no "$cg"
    grep -q '^kprof correction: ' "$dir/out" || fail "callgrind_annotate shows no correction (desc:)"
    grep -q '^Profiled target: *kprof flame$' "$dir/out" || fail "callgrind_annotate shows no cmd:"
    run "callgrind_annotate --inclusive=yes --tree=both $(basename "$cg")" \
      callgrind_annotate --auto=no --inclusive=yes --tree=both "$cg"
  done
  for sub in a b; do
    meta=$(file_of "$sub" folded | sed 's/\.folded$/.meta.json/')
    for j in $(file_of "$sub" speedscope) "$meta"; do
      run "strict JSON $sub/$(basename "$j")" perl -w -MJSON::PP -e \
        'local $/; open(my $f, "<", $ARGV[0]) or die; JSON::PP->new->utf8->decode(<$f>)' "$j"
    done
    run "meta $sub" perl -w -MJSON::PP -e '
      my ($meta, $folded, $formats, $applied) = @ARGV;
      local $/;
      open(my $f, "<", $meta) or die; my $m = JSON::PP->new->utf8->decode(<$f>);
      open($f, "<", $formats) or die; my @want = split /\n/, <$f>;
      open($f, "<", $folded) or die; my $t = <$f>; my $sum = 0; $sum += $1 while $t =~ /(\d+)$/mg;
      die "formats @{$m->{formats}}, asked @want\n" unless "@{$m->{formats}}" eq "@want";
      die "total_us $m->{total_us}, the folded counts sum to $sum\n" unless $m->{total_us} == $sum;
      die "processes $m->{processes}\n" unless $m->{processes} >= 1;
      die "correction applied $m->{correction}{applied}\n" unless ($m->{correction}{applied} ? 1 : 0) == $applied;
      die "correction text $m->{correction}{text}\n" unless $m->{correction}{text} =~ /^kprof correction: /;
      die "units\n" unless $m->{units}{folded} eq "us" && $m->{units}{folded_calls} eq "calls";
      ' "$meta" "$(file_of "$sub" folded)" "$dir/formats" \
      "$([ $sub = a ] && echo 1 || echo 0)"
  done
}

flamegraph() {
  fg=${FLAMEGRAPH_DIR:-$(dirname "$(command -v flamegraph.pl)")}
  for sub in a b; do
    for f in $(file_of "$sub" folded) $(file_of "$sub" folded_calls); do
      lines_ok "$f" 1 || fail "$sub/$(basename "$f"): a line that is no \"frames count\""
      case $f in *.calls.folded) count=--countname=calls ;; *) count=--countname=us ;; esac
      run "flamegraph.pl $count $sub/$(basename "$f")" perl -w "$fg/flamegraph.pl" $count "$f"
      grep -q '<svg' "$dir/out" || fail "flamegraph.pl drew no SVG"
    done
    for p in $(file_of "$sub" perf); do
      run "stackcollapse-perf.pl $sub/$(basename "$p")" perl -w "$fg/stackcollapse-perf.pl" "$p"
      mv "$dir/out" "$dir/collapsed"
      lines_ok "$dir/collapsed" 1 || fail "stackcollapse-perf.pl folded no stack"
      run "flamegraph.pl on stackcollapse-perf.pl's" perl -w "$fg/flamegraph.pl" "$dir/collapsed"
    done
  done
  for fmt in folded folded_calls; do
    a=$(file_of a $fmt)
    b=$(file_of b $fmt)
    run "difffolded.pl a b ($fmt)" perl -w "$fg/difffolded.pl" "$a" "$b"
    mv "$dir/out" "$dir/diff"
    lines_ok "$dir/diff" 2 || fail "difffolded.pl: a line that is no \"frames count count\""
    union=$(cat "$a" "$b" | sed 's/ [0-9]*$//' | sort -u | wc -l)
    [ "$(wc -l < "$dir/diff")" -eq "$union" ] ||
      fail "difffolded.pl gave $(wc -l < "$dir/diff") lines for $union stacks"
    run "flamegraph.pl on difffolded.pl's ($fmt)" perl -w "$fg/flamegraph.pl" "$dir/diff"
  done
}

case $what in
  annotate) annotate ;;
  flamegraph) flamegraph ;;
  *) echo "usage: check.sh DIR annotate|flamegraph" >&2; exit 2 ;;
esac
[ "$fails" -eq 0 ] && echo "check-readers: $what: all passed" || exit 1
