"""Small statistics helpers: the sample file of `llada-lsp demo`.

The demo opens this file, puts the cursor after the docstring of each function whose body
is only a docstring (as if the user had just pressed Enter there), and asks the language
server for the body.
"""

import math


def mean(values: list[float]) -> float:
    """The arithmetic mean of values."""


def variance(values: list[float]) -> float:
    """The population variance of values."""


def stddev(values: list[float]) -> float:
    """The population standard deviation of values."""
    return math.sqrt(variance(values))


def clamp(x: float, low: float, high: float) -> float:
    """x limited to the range [low, high]."""


if __name__ == "__main__":
    data = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]
    print(mean(data), variance(data), stddev(data), clamp(11.0, 0.0, 10.0))
