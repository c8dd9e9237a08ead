"""Log and sensor helpers: functions that return several values at once and callers that
unpack them (written for bench/next_edit.py's return_added kind)."""

from __future__ import annotations

import math
import re

LINE = re.compile(r"(\d+)-(\d+)-(\d+) (\w+) (.*)")


def split_entry(line):
    match = LINE.match(line)
    day = match.group(3)
    level = match.group(4).lower()
    message = match.group(5).strip()
    return day, level, message


def bounds(values):
    low = min(values)
    high = max(values)
    mean = sum(values) / len(values)
    return low, high, mean


def polar(x, y):
    radius = math.hypot(x, y)
    angle = math.atan2(y, x)
    quadrant = (1 if y >= 0 else 4) if x >= 0 else (2 if y >= 0 else 3)
    return radius, angle, quadrant


def parse_size(text):
    width, _, rest = text.partition("x")
    height, _, depth = rest.partition("x")
    unit = "cm" if text.endswith("cm") else "mm"
    depth = depth.removesuffix(unit)
    return int(width), int(height), int(depth or 0), unit


def head_tail(items, size):
    head = items[:size]
    tail = items[-size:]
    middle = items[size:-size]
    return head, middle, tail


class Reading:
    def __init__(self, samples):
        self.samples = list(samples)

    def summary(self):
        count = len(self.samples)
        total = sum(self.samples)
        peak = max(self.samples, default=0)
        return count, total, peak

    def split_at(self, limit):
        below = [s for s in self.samples if s < limit]
        above = [s for s in self.samples if s >= limit]
        ratio = len(above) / max(1, len(self.samples))
        return below, above, ratio


def report(lines, readings):
    out = []
    for line in lines:
        day, level, message = split_entry(line)
        out.append(f"{day} [{level}] {message}")
    low, high, mean = bounds([len(x) for x in out] or [0])
    out.append(f"widths {low}..{high}, mean {mean:.1f}")
    for r in readings:
        count, total, peak = r.summary()
        below, above, ratio = r.split_at(total / max(1, count))
        out.append(f"{count} samples, peak {peak}, {len(below)} below, {len(above)} above ({ratio:.0%})")
    return out


def locate(points):
    rows = []
    for x, y in points:
        radius, angle, quadrant = polar(x, y)
        rows.append((quadrant, round(radius, 2), round(math.degrees(angle))))
    first, rest, last = head_tail(rows, 1)
    return first + last, len(rest)


def box_volume(label):
    width, height, depth, unit = parse_size(label)
    w, h, d, u = parse_size(label.upper())
    volume = width * height * max(depth, 1)
    return volume if unit == u.lower() else volume * (w // max(1, w))


def spread(readings):
    low, high, mean = bounds([sum(r.samples) for r in readings])
    lo_day, lo_level, lo_message = split_entry(f"2024-01-{int(low) % 28 + 1:02d} info low {low}")
    return high - low, mean, lo_day, lo_level, lo_message
