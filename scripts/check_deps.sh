#!/bin/sh
# make check-deps: kprof as a user takes it, from a file:// clone of this
# commit (HEAD: what is not committed is not checked), in a temporary
# directory, offline:
#   preflight  scripts/preflight.sh names what is missing (a compiler without
#              libuv's headers, a libuv that does not link, no make) and its packages
#   rebar3     a fresh `rebar3 new app' with kprof as a git dependency: compile,
#              a flame graph, `rebar3 release', `bin/x eval' of a tiers run and
#              of its report (text, not #Bin<...>)
#   mix        a fresh `mix new' with kprof as a git dependency, no rebar3 and
#              no MIX_REBAR3: compile, `mix run' of a capture, the docs
#              (Code.fetch_docs, IEx's h)
#   hex        exactly the files of the .app.src's `files' list copied into a
#              directory of their own, built from there as a dependency
# As root, it runs in a network namespace of its own with only loopback
# (unshare -n): rebar3 and mix cannot reach the network, hex.pm included.
# Otherwise the header says the check was not isolated (HEX_OFFLINE keeps mix
# off hex; REBAR_OFFLINE would refuse the git dependency too, so it is not
# set). Each step prints its command, exit code and time.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)

if [ -z "${KPROF_CHECK_DEPS_NS:-}" ]; then
  if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null 2>&1 && command -v ip >/dev/null 2>&1 &&
     unshare -n true 2>/dev/null; then
    exec unshare -n env KPROF_CHECK_DEPS_NS=isolated sh -c 'ip link set lo up && exec "$0"' "$0"
  fi
  KPROF_CHECK_DEPS_NS="NOT isolated (not root, or no unshare or ip): only HEX_OFFLINE"
fi

REV=$(git -C "$ROOT" rev-parse HEAD) || exit 1
URL="file://$ROOT"
TMP=$(mktemp -d /tmp/kprof-check-deps.XXXXXX)
NAME="kx$$"
failures=""
export HOME="$TMP/home" MIX_HOME="$TMP/home/mix" HEX_HOME="$TMP/home/hex" \
  REBAR_CACHE_DIR="$TMP/home/rebar3-cache" HEX_OFFLINE=1 MIX_ENV=dev CI=true
unset MIX_REBAR3 ERL_LIBS
mkdir -p "$HOME"

cleanup() {
  [ -x "$TMP/r3/x/_build/default/rel/x/bin/x" ] && "$TMP/r3/x/_build/default/rel/x/bin/x" ping >/dev/null 2>&1 &&
    "$TMP/r3/x/_build/default/rel/x/bin/x" stop >/dev/null 2>&1
  # An epmd started in this network namespace (by the release's node) serves
  # nothing else and would outlive the check: each one is ended by its pid.
  if [ "$KPROF_CHECK_DEPS_NS" = isolated ]; then
    ns=$(readlink /proc/self/ns/net)
    for p in $(pgrep -x epmd); do
      [ "$(readlink "/proc/$p/ns/net" 2>/dev/null)" = "$ns" ] && kill "$p" 2>/dev/null
    done
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

now() { date +%s.%N; }
since() { echo "$1 $(now)" | awk '{ printf "%.1f", $2 - $1 }'; }
fail() { echo "  FAILED: $1"; failures="$failures $2"; }

# step DIR CMD...: run and time one command as a user types it; its output in $OUT.
OUT="$TMP/step.out"
# The command as a user types it: an argument with a space, a quote or
# anything but [A-Za-z0-9_./:=@%+,-] in single quotes.
show_args() {
  out=""
  for a in "$@"; do
    case $a in
      "" | *[!A-Za-z0-9_./:=@%+,-]*) a="'$(printf '%s' "$a" | sed "s/'/'\\\\''/g")'" ;;
    esac
    out="$out${out:+ }$a"
  done
  printf '%s' "$out"
}

# SHOW, when set, is what the command is shown as (a `sh -c' script's text).
step() {
  dir=$1
  shift
  echo "\$ ${SHOW:-$(show_args "$@")}      # in ${dir#$TMP/}"
  SHOW=""
  t0=$(now)
  (cd "$dir" && "$@") > "$OUT" 2>&1
  rc=$?
  echo "  exit $rc, $(since "$t0") s"
  if [ $rc -ne 0 ]; then
    tail -n 30 "$OUT" | sed 's/^/  | /'
  fi
  return $rc
}
# has WHAT PATTERN: the last step's output matches PATTERN (grep -E).
has() {
  if grep -Eq "$2" "$OUT"; then echo "  ok: $1"; else fail "$1 (no /$2/ in the output)" "$3"; tail -n 20 "$OUT" | sed 's/^/  | /'; fi
}

T0=$(now)
echo "check-deps: kprof $REV from $URL, in $TMP, network: $KPROF_CHECK_DEPS_NS"
echo "  $(rebar3 version 2>/dev/null), $(elixir --version 2>/dev/null | tail -n 1); load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"

### preflight: what a build without libuv or make says
echo "== preflight"
mkdir -p "$TMP/empty" "$TMP/bin"
printf '#!/bin/sh\nexec "%s" --sysroot="%s" "$@"\n' "$(command -v cc)" "$TMP/empty" > "$TMP/bin/cc-without-libuv"
chmod +x "$TMP/bin/cc-without-libuv"
if step "$ROOT" env CC="$TMP/bin/cc-without-libuv" scripts/preflight.sh; then
  fail "preflight passed with no uv.h" preflight
else
  has "no uv.h: named with its packages" "missing libuv's headers \(uv.h\): install libuv1-dev \(Debian/Ubuntu\), libuv-devel \(Fedora\), libuv-dev \(Alpine\), libuv \(macOS, Homebrew\)" preflight
fi
if step "$ROOT" env UV_LIBS=-lkprof_no_such_uv MAKE=kprof-no-make scripts/preflight.sh; then
  fail "preflight passed with no libuv library and no make" preflight
else
  has "a libuv that does not link: named" "missing libuv's library .*install libuv1-dev" preflight
  has "no make: named" "missing make: install make \(Debian/Ubuntu\)" preflight
fi
step "$ROOT" scripts/preflight.sh || fail "preflight fails on this machine" preflight

### rebar3: a git dependency, a flame graph, a release and bin/x eval
echo "== rebar3"
mkdir -p "$TMP/r3"
if step "$TMP/r3" rebar3 new app x; then
  X="$TMP/r3/x"
  mkdir -p "$X/config"
  cat > "$X/rebar.config" <<EOF
{erl_opts, [debug_info]}.
{deps, [{kprof, {git, "$URL", {ref, "$REV"}}}]}.
{relx, [{release, {x, "0.1.0"}, [x, kprof]},
        {mode, prod}, {include_erts, false}, {vm_args, "config/vm.args"}]}.
EOF
  printf -- '-sname %s@localhost\n-setcookie %s\n' "$NAME" "$NAME" > "$X/config/vm.args"
  cat > "$X/src/x_work.erl" <<'EOF'
-module(x_work).
-export([page/1, query/1]).
page(N) -> _ = query(N), lists:flatten(io_lib:format("~p", [lists:seq(1, N)])).
query(N) -> timer:sleep(1), lists:sum(lists:seq(1, N)).
EOF
  echo "  (rebar.config: {deps, [{kprof, {git, \"$URL\", {ref, \"$REV\"}}}]} and a relx release [x, kprof]; src/x_work.erl)"
  if step "$X" rebar3 compile; then
    has "the dependency's hook built the sink and the NIF" "kprof_tracer.so" rebar3
    for f in kprof_sink kprof_tracer.so; do
      [ -x "$X/_build/default/lib/kprof/priv/$f" ] || fail "no priv/$f in the dependency" rebar3
    done
    [ -f "$X/_build/default/lib/kprof/doc/chunks/kprof.chunk" ] || fail "no doc chunks beside the dependency's ebin" rebar3
    SHOW=$(cat <<'EOF'
erl -noshell -pa $(rebar3 path) -eval '
        {ok, _, Files} = kprof:flame_apply(fun() -> x_work:page(300) end,
                                           #{output_directory => "flame", output_format => [folded, svg]}),
        io:format("~p~n", [Files]), halt().' && cat flame/*.folded
EOF
)
    step "$X" sh -c "$SHOW" || fail "flame_apply from the app" rebar3
    has "a flame graph of x_work:page/1" "x_work:page/1;x_work:query/1" rebar3
    if step "$X" rebar3 release; then
      REL=_build/default/rel/x
      ldd "$X/$REL/lib/kprof-0.1.0/priv/kprof_sink" 2>/dev/null | grep -q libuv &&
        fail "the release's sink needs a shared libuv" rebar3
      if step "$X" $REL/bin/x daemon; then
        SHOW="$REL/bin/x ping   # until it answers, at most 10 s"
        step "$X" sh -c 'for i in $(seq 1 100); do "$0" ping >/dev/null 2>&1 && exec "$0" ping; sleep 0.1; done; exit 1' $REL/bin/x ||
          fail "the release does not answer ping" rebar3
        step "$X" $REL/bin/x eval 'ok = kprof:start_tiers([{page, [{x_work, page, 1}]}, {query, [{x_work, query, 1}]}], #{}), [kprof:request(I rem 2, fun() -> x_work:page(I) end) || I <- lists:seq(1, 20)], kprof:stop_tiers().' ||
          fail "bin/x eval of a tiers run" rebar3
        sed 's/^/  > /' "$OUT"
        has "the tiers run ends with ok" "^ok$" rebar3
        if step "$X" $REL/bin/x eval 'kprof:report(#{format => string}).'; then
          cat "$OUT" | sed 's/^/  > /'
          has "the report's header, as text" "^\{ok, \{ok, \"kprof tiers on $NAME@localhost: .* requests 20 recorded" rebar3
          has "its table, line by line" "^identity +reqs +page +query +other" rebar3
          has "both identities" "^1 +10 " rebar3
          if grep -q '#Bin<' "$OUT"; then fail "the report as #Bin<...>" rebar3; fi
        else
          fail "bin/x eval of the report" rebar3
        fi
        step "$X" $REL/bin/x stop || fail "bin/x stop" rebar3
      else
        fail "bin/x daemon" rebar3
      fi
    else
      fail "rebar3 release" rebar3
    fi
  else
    fail "rebar3 compile with kprof as a git dependency" rebar3
  fi
else
  fail "rebar3 new app" rebar3
fi

### mix: a git dependency with mix alone
echo "== mix"
mkdir -p "$TMP/mix"
if step "$TMP/mix" mix new m; then
  M="$TMP/mix/m"
  sed -i "s|# {:dep_from_hexpm, \"~> 0.3.0\"},|{:kprof, git: \"$URL\", ref: \"$REV\"},|" "$M/mix.exs"
  grep -q ":kprof, git:" "$M/mix.exs" || fail "could not add kprof to mix.exs" mix
  echo "  (mix.exs: {:kprof, git: \"$URL\", ref: \"$REV\"}; MIX_REBAR3 unset, no rebar3 in MIX_HOME)"
  step "$M" mix deps.get || fail "mix deps.get" mix
  if step "$M" mix compile; then
    has "kprof built by its mix.exs" "==> kprof" mix
    step "$M" mix deps
    has "kprof is a mix dependency (no rebar3)" "kprof .*\(mix\)" mix
    step "$M" mix run -e '
      {:ok, _, files} = :kprof.flame_apply(fn -> Enum.sum(1..1000) end,
                                           output_directory: "flame", output_format: [:folded, :svg])
      IO.inspect(files)
      IO.write(File.read!(hd(files)))' || fail "mix run of a capture" mix
    has "a flame graph from mix run" "Elixir.Enum:sum/1" mix
    if grep -q '\[debug\]' "$OUT"; then fail "the capture logged at debug level" mix; fi
    step "$M" mix run -e '
      {:docs_v1, _, :erlang, _, _, _, docs} = Code.fetch_docs(:kprof)
      IO.puts("kprof docs: #{length(docs)} entries")
      require IEx.Helpers
      IEx.Helpers.h(:kprof.flame_apply / 2)' || fail "mix run of the docs" mix
    has "Code.fetch_docs(:kprof)" "kprof docs: [0-9]+ entries" mix
    has "IEx's h :kprof.flame_apply/2" "flame_apply\(MFArgs" mix
  else
    fail "mix compile with kprof as a git dependency" mix
  fi
else
  fail "mix new" mix
fi

### hex: exactly the files the package lists, built as a dependency
echo "== hex"
PKG="$TMP/pkg"
mkdir -p "$PKG"
files=$(cd "$ROOT" && erl -noshell -eval '
  {ok, [{application, kprof, App}]} = file:consult("erlang/src/kprof.app.src"),
  [io:format("~s~n", [F]) || F <- proplists:get_value(files, App)], halt().')
# As rebar3_hex expands the list: each entry a wildcard, a directory walked,
# a link kept as a link; editor files, objects and shared objects left out.
# From a clone of this commit: nothing built, nothing uncommitted.
git clone -q "$URL" "$TMP/clone" && git -C "$TMP/clone" checkout -q "$REV" || fail "git clone" hex
for f in $files; do
  (cd "$TMP/clone" && for g in $f; do
     [ -e "$g" ] || [ -L "$g" ] || { echo "  FAILED: files names $g, which is not in the tree"; exit 1; }
     find "$g" \( -type f -o -type l \) ! -name '*~' ! -name '*.o' ! -name '*.so' ! -name '*.swp'
   done) || fail "files names a path the tree lacks" hex
done | sort -u > "$TMP/pkg.list"
(cd "$TMP/clone" && tar cf - -T "$TMP/pkg.list") | (cd "$PKG" && tar xf -) || fail "copying the files" hex
echo "  $(wc -l < "$TMP/pkg.list") files from $(echo $files | wc -w) entries of the files list"
(cd "$PKG" && git init -q && git add -A && git -c user.name=check -c user.email=check@localhost commit -qm package) ||
  fail "git init of the package" hex
mkdir -p "$TMP/hex"
if step "$TMP/hex" rebar3 new app y; then
  Y="$TMP/hex/y"
  printf '{erl_opts, [debug_info]}.\n{deps, [{kprof, {git, "file://%s", {branch, "master"}}}]}.\n' "$PKG" > "$Y/rebar.config"
  git -C "$PKG" branch -M master
  if step "$Y" rebar3 compile; then
    SHOW=$(cat <<'EOF'
erl -noshell -pa $(rebar3 path) -eval '
        ok = kprof:start(), io:format("~p~n", [kprof:sink_version()]),
        {ok, 3, Files} = kprof:flame_apply(fun() -> lists:sum([1, 2]) end,
                                           #{output_directory => "flame", output_format => folded}),
        io:format("~p~n", [Files]), halt().'
EOF
)
    step "$Y" sh -c "$SHOW" || fail "kprof from the package's files" hex
    has "the package's sink answers" "\{kprof_sink," hex
  else
    fail "rebar3 compile of the package's files as a dependency" hex
  fi
fi

echo "check-deps: $(since "$T0") s in all"
if [ -n "$failures" ]; then
  echo "check-deps: FAILED:$(echo "$failures" | tr ' ' '\n' | sort -u | tr '\n' ' ')"
  exit 1
fi
echo "check-deps: ok"
