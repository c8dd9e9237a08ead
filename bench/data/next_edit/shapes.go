// Written for bench/next_edit.py: structs, keyed literals and methods.
package shapes

import "fmt"

type Rect struct {
	X      int
	Y      int
	Width  int
	Height int
}

type Style struct {
	Color  string
	Border int
	Dashed bool
}

type Canvas struct {
	Name  string
	Items []Rect
	Scale float64
}

func (c *Canvas) AddRect(x int, y int, w int, h int) {
	c.Items = append(c.Items, Rect{X: x, Y: y, Width: w, Height: h})
}

func (c *Canvas) Paint(color string, border int, dashed bool) Style {
	return Style{Color: color, Border: border, Dashed: dashed}
}

func (c *Canvas) Resize(factor float64, minimum float64) float64 {
	c.Scale = factor * minimum
	return c.Scale
}

func build() []Rect {
	a := Rect{X: 0, Y: 0, Width: 10, Height: 5}
	b := Rect{
		X:      3,
		Y:      4,
		Width:  1,
		Height: 1,
	}
	c := Rect{Width: 2, Height: 2}
	return []Rect{a, b, c, {X: 1, Y: 1, Width: 1, Height: 1}}
}

func styles() []Style {
	plain := Style{Color: "black", Border: 1, Dashed: false}
	loud := Style{
		Color:  "red",
		Border: 3,
		Dashed: true,
	}
	return []Style{plain, loud, Style{Color: "grey", Border: 0, Dashed: true}}
}

func run() {
	cv := &Canvas{Name: "main", Items: nil, Scale: 1.0}
	other := Canvas{
		Name:  "side",
		Items: build(),
		Scale: 0.5,
	}
	cv.AddRect(1, 2, 3, 4)
	cv.AddRect(5, 6, 7, 8)
	other.AddRect(0, 0, 1, 1)
	s := cv.Paint("blue", 2, false)
	t := other.Paint("green", 1, true)
	fmt.Println(s, t, cv.Resize(2.0, 0.5), other.Resize(0.5, 1.0))
}
