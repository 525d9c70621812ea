#!/bin/sh
# `make demo`: the main job, run on the example application (examples/).
set -eu
cd "$(dirname "$0")/.."
mkdir -p _build/examples
erlc -o _build/examples examples/basic/*.erl
exec erl -noshell -pa erlang/ebin -pa _build/examples -eval 'kprof_demo_basic:main(), halt().'
