"use strict";

const { describe, it, test } = require("node:test");
const assert = require("node:assert");
const { evaluate } = require("../src/rpn");

describe("subtraction", () => {
  it("subtracts in written order", () => {
    assert.deepStrictEqual(evaluate("7 2 -"), { value: 5 });
    assert.deepStrictEqual(evaluate("2 9 -"), { value: -7 });
  });

  it("nested subtraction", () => {
    assert.deepStrictEqual(evaluate("10 2 3 - -"), { value: 11 });
    assert.deepStrictEqual(evaluate("4 6 * 3 -"), { value: 21 });
  });
});

test("divides in written order", () => {
  assert.deepStrictEqual(evaluate("8 2 /"), { value: 4 });
  assert.deepStrictEqual(evaluate("7 2 /"), { value: 3 });
});

test("division by zero is an error", () => {
  assert.deepStrictEqual(evaluate("1 0 /"), { error: "division by zero" });
  assert.deepStrictEqual(evaluate("3 +"), { error: "stack underflow" });
});
