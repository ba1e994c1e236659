#!/usr/bin/env bash
# Written in session 43, not yet run (no machine came before the device time was spent): which
# step of the leaner decode slowed the 4-warp 16-row tensor-core GEMV (12288 x 4096 at 12 / 16
# rows: 27.1 / 28.9 -> 28.1 / 31.3 us, results-v38.txt, while 4096 x 12288 on the 8-warp kernel
# got faster): bench_gemv --rows of the trees in .gl/bisect-*.tar (the base 1f6b2cd and the
# commits 1b4cf29 lookup + scales, 22c8525 tile 0 unpredicated, d25fb03 the MMA's bias; make
# them with git archive), built one after another in /tmp/bisect/NAME, two rounds.
#   (timeout 500 bash bench/gpu/calls/session43-bisect.sh > $OUT/log.txt 2>&1); tail -c 11000 $OUT/log.txt
cd "$(dirname "$0")/../../.." || exit 1
source bench/gpu/call-lib-h200.sh
names=()
for t in .gl/bisect-*.tar; do
  n=$(basename "$t" .tar)
  rm -rf "/tmp/bisect/$n" && mkdir -p "/tmp/bisect/$n" && tar -xf "$t" -C "/tmp/bisect/$n" &&
    cp -r .debs "/tmp/bisect/$n/"
  (cd "/tmp/bisect/$n" && call_build bench_gemv) >"/tmp/bisect/$n.build.txt" 2>&1
  echo "$n: $(head -1 "/tmp/bisect/$n.build.txt")"
  names+=("$n")
done
for round in 1 2; do
  for n in "${names[@]}"; do
    echo "$n round $round: $("/tmp/bisect/$n/build-h200/bench/gpu/bench_gemv" --rows 2>&1 | grep iq4_xs |
      sed -nE 's/.*"out":([0-9]+),"in":[0-9]+,"rows":([0-9]+).*"us":([0-9.]+).*/\1x\2 \3/p' |
      grep -v "x1 " | tr '\n' ' ')"
  done
done
call_done
