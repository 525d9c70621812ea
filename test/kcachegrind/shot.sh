#!/bin/sh
# shot.sh DIR PNG: opens DIR/callgrind.out.report (test/kcachegrind/capture.escript)
# in KCachegrind under Xvfb, selects the function of DIR/expect.txt's first line
# (typed into the flat profile's search box), shows its Call Graph tab, and saves
# a screenshot of the screen to PNG. Then checks what it can without reading
# the pixels' text: KCachegrind's window is titled with the file (it loaded it),
# and the call graph's area holds a drawn graph (thousands of colours; an empty
# or unselected panel has under a hundred). Exits non-zero, saying why, when not.
# Fixed screen (1280x900) and window geometry: the clicks below are places in it.
set -eu
dir=$1 png=$2
file=$dir/callgrind.out.report
fn=$(head -1 "$dir/expect.txt")
# KCachegrind's settings in a directory of the check's own: no tips dialog, and
# nothing of the user's read or written.
export XDG_CONFIG_HOME="$dir/config" XDG_RUNTIME_DIR="$dir/runtime"
mkdir -p "$XDG_CONFIG_HOME" && mkdir -p -m 700 "$XDG_RUNTIME_DIR"
printf '[TipOfDay]\nRunOnStart=false\n' > "$XDG_CONFIG_HOME/kcachegrindrc"
cat > "$dir/session.sh" <<SESSION
#!/bin/sh
set -eu
kcachegrind "$file" > "$dir/kcachegrind.log" 2>&1 &
k=\$!
trap 'kill \$k 2>/dev/null || true' EXIT
w=\$(timeout 60 xdotool search --sync --onlyvisible --pid \$k --name KCachegrind | tail -1)
xdotool windowmove \$w 0 0 windowsize --sync \$w 1280 900
sleep 2
xdotool getwindowname \$w > "$dir/title.txt"
xdotool mousemove 128 89 click 1 && sleep 0.5 && xdotool type "$fn"
sleep 1
xdotool mousemove 200 138 click 1 && sleep 1
xdotool mousemove 521 856 click 1 && sleep 1
# The call graph panel made taller: its splitter dragged up.
xdotool mousemove 810 477 mousedown 1 mousemove 810 300 sleep 0.3 mousemove 810 140 mouseup 1
sleep 4
import -window root "$png"
SESSION
chmod +x "$dir/session.sh"
xvfb-run -a -s "-screen 0 1280x900x24" dbus-run-session -- "$dir/session.sh" 2> "$dir/xvfb.log" || {
  echo "check-kcachegrind: the session failed:" >&2; cat "$dir/xvfb.log" "$dir/kcachegrind.log" >&2; exit 1; }
case $(cat "$dir/title.txt") in
  *callgrind.out.report*) ;;
  *) echo "check-kcachegrind: the window is titled '$(cat "$dir/title.txt")', not the file" >&2; exit 1 ;;
esac
colours=$(convert "$png" -crop 900x560+350+200 -format '%k' info:)
if [ "$colours" -lt 1000 ]; then
  echo "check-kcachegrind: no call graph in $png ($colours colours in its area)" >&2
  exit 1
fi
echo "check-kcachegrind: $file open in KCachegrind, $fn's call graph in $png ($colours colours)"
