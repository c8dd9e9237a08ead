import os
import re


def read_words(path):
    """Return the words of a text file, lower-cased."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return re.findall(r"[a-z']+", text.lower())


def count_words(words):
    counts: dict[str, int] = {}
    for word in words:
        counts[word] = counts.get(word, 0) + 1
    return counts


def top_words(counts, n=10):
    items = sorted(counts.items(), key=lambda kv: kv[1], reverse=True)
    return items[:n]


def main(argv):
    if len(argv) < 2:
        print("usage: words FILE")
        return 2
    path = argv[1]
    if not os.path.exists(path):
        print(f"no such file: {path}")
        return 1
    for word, count in top_words(count_words(read_words(path))):
        print(f"{count:6d} {word}")
    return 0
