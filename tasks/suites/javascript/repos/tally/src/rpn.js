"use strict";

const OPERATORS = {
  "+": (left, right) => left + right,
  "-": (left, right) => left - right,
  "*": (left, right) => left * right,
  "/": (left, right) => Math.trunc(left / right),
};

/** Evaluates a postfix expression of integers and + - * /, separated by spaces: { value } or { error }. */
function evaluate(expr) {
  const stack = [];
  for (const token of expr.split(/\s+/).filter(Boolean)) {
    if (/^-?\d+$/.test(token)) {
      stack.push(Number(token));
      continue;
    }
    if (!(token in OPERATORS)) {
      return { error: `bad token ${token}` };
    }
    if (stack.length < 2) {
      return { error: "stack underflow" };
    }
    const right = stack.pop();
    const left = stack.pop();
    if (token === "/" && right === 0) {
      return { error: "division by zero" };
    }
    stack.push(OPERATORS[token](left, right));
  }
  if (stack.length !== 1) {
    return { error: "leftover values" };
  }
  return { value: stack[0] };
}

module.exports = { evaluate };
