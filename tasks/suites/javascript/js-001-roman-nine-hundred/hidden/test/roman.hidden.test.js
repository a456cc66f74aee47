"use strict";

const { test } = require("node:test");
const assert = require("node:assert");
const { toRoman, fromRoman } = require("../src/roman");

test("nine hundred is CM", () => {
  assert.strictEqual(toRoman(900), "CM");
  assert.strictEqual(toRoman(949), "CMXLIX");
});

test("year 1994", () => {
  assert.strictEqual(toRoman(1994), "MCMXCIV");
  assert.strictEqual(toRoman(3999), "MMMCMXCIX");
});

test("reads back 1994", () => {
  assert.strictEqual(fromRoman("MCMXCIV"), 1994);
  assert.strictEqual(fromRoman("CMXC"), 990);
});

test("four hundreds", () => {
  assert.strictEqual(toRoman(444), "CDXLIV");
  assert.strictEqual(fromRoman("CDXLIV"), 444);
});
