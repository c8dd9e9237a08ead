package stack

import (
	"errors"
	"fmt"
)

// Stack is a LIFO stack of ints.
type Stack struct {
	items []int
}

// Push adds an item on top.
func (s *Stack) Push(v int) {
	s.items = append(s.items, v)
}

// Pop removes the top item.
func (s *Stack) Pop() (int, error) {
	if len(s.items) == 0 {
		return 0, errors.New("empty stack")
	}
	v := s.items[len(s.items)-1]
	s.items = s.items[:len(s.items)-1]
	return v, nil
}

// Len returns the number of items.
func (s *Stack) Len() int {
	
}

func (s *Stack) String() string {
	return fmt.Sprintf("Stack(%v)", s.items)
}
