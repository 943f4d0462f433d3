#!/usr/bin/env python3
"""Summary of a soak by docs/figures/soak-2026-12-07.sh: per carrier, the
seeds run, the chunks passed and failed, the failing seeds, and the wall
time the chunks took."""
import datetime, glob, os, re, sys

out = sys.argv[1]
names = {"sim": "TestSim (Diameter)", "ssim": "TestSimRADIUSStream", "usim": "TestSimUDP"}
for flag, name in names.items():
    seeds = passed = failed = 0
    secs = 0.0
    bad = []
    for log in sorted(glob.glob(os.path.join(out, f"{flag}-*.log"))):
        text = open(log).read()
        m = re.search(r"^start (\S+) \S+ seeds (\d+)\.\.(\d+)", text, re.M)
        e = re.search(r"^end (\S+)", text, re.M)
        rc = re.search(r"^rc=(\d+)", text, re.M)
        if not (m and e and rc):
            continue  # running, or cut short
        t0 = datetime.datetime.fromisoformat(m.group(1).replace("Z", "+00:00"))
        t1 = datetime.datetime.fromisoformat(e.group(1).replace("Z", "+00:00"))
        secs += (t1 - t0).total_seconds()
        seeds += int(m.group(3)) - int(m.group(2)) + 1
        if rc.group(1) == "0":
            passed += 1
        else:
            failed += 1
            bad += re.findall(r"seed \d+[^\n]*", text)[:5] or [os.path.basename(log) + ": rc=" + rc.group(1)]
    rate = f", {seeds / secs:.1f} seeds/s" if secs else ""
    print(f"{name}: {seeds} seeds in {passed + failed} chunks, {passed} passed, {failed} failed; {secs / 3600:.2f} h of wall time{rate}")
    for b in bad:
        print("   ", b)
