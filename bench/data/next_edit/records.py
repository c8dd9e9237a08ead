"""Written for bench/next_edit.py: records and their constructors."""

from dataclasses import dataclass
from typing import NamedTuple


@dataclass
class Item:
    sku: str
    title: str
    price: float
    stock: int


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    line: int


class Point(NamedTuple):
    x: float
    y: float
    label: str


@dataclass
class Order:
    order_id: int
    customer: str
    items: list
    total: float


def catalog():
    tea = Item("t-1", "green tea", 3.5, 40)
    mug = Item("m-2", "blue mug", 7.25, 12)
    pot = Item(sku="p-3", title="tea pot", price=21.0, stock=3)
    spoon = Item("s-4", "spoon", price=1.1, stock=90)
    return [tea, mug, pot, spoon, Item("b-5", "box", 2.0, 0)]


def spans(text):
    first = Span(0, len(text), 1)
    rest = [Span(i, i + 1, text.count("\n", 0, i) + 1) for i in range(len(text))]
    whole = Span(start=0, end=len(text), line=0)
    return first, rest, whole, Span(2, 3, line=4)


def points():
    origin = Point(0.0, 0.0, "origin")
    unit = Point(1.0, 1.0, "unit")
    far = Point(x=1e6, y=-1e6, label="far")
    return [origin, unit, far, Point(2.5, 3.5, label="mid")]


def orders(items):
    a = Order(1, "ann", items[:2], 10.75)
    b = Order(2, "bo", items[2:], sum(i.price for i in items[2:]))
    c = Order(order_id=3, customer="cy", items=[], total=0.0)
    return [a, b, c, Order(4, "di", [items[0]], total=items[0].price)]
