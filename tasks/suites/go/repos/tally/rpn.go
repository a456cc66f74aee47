package tally

import (
	"strconv"
	"strings"
)

// Result is what Eval gives: the value, or why there is none.
type Result struct {
	Value int
	Err   string
}

// Eval evaluates a postfix expression of integers and + - * /, separated by spaces.
func Eval(expr string) Result {
	var stack []int
	for _, token := range strings.Fields(expr) {
		if n, err := strconv.Atoi(token); err == nil {
			stack = append(stack, n)
			continue
		}
		if len(stack) < 2 {
			return Result{Err: "stack underflow"}
		}
		left, right := stack[len(stack)-2], stack[len(stack)-1]
		stack = stack[:len(stack)-2]
		var value int
		switch token {
		case "+":
			value = left + right
		case "-":
			value = left - right
		case "*":
			value = left * right
		case "/":
			if right == 0 {
				return Result{Err: "division by zero"}
			}
			value = left / right
		default:
			return Result{Err: "bad token " + token}
		}
		stack = append(stack, value)
	}
	if len(stack) != 1 {
		return Result{Err: "leftover values"}
	}
	return Result{Value: stack[0]}
}
