"use strict";

const TABLE = [
  [1000, "M"], [900, "CM"], [500, "D"], [400, "CD"], [100, "C"], [90, "XC"],
  [50, "L"], [40, "XL"], [10, "X"], [9, "IX"], [5, "V"], [4, "IV"], [1, "I"],
];

/** The canonical Roman numeral of n, or "" outside 1..3999. */
function toRoman(n) {
  if (!Number.isInteger(n) || n <= 0 || n > 3999) {
    return "";
  }
  let out = "";
  for (const [value, symbol] of TABLE) {
    while (n >= value) {
      out += symbol;
      n -= value;
    }
  }
  return out;
}

/** The value of a canonical Roman numeral, or 0 if s is not one. */
function fromRoman(s) {
  let rest = s;
  let total = 0;
  for (const [value, symbol] of TABLE) {
    while (rest.startsWith(symbol)) {
      total += value;
      rest = rest.slice(symbol.length);
    }
  }
  return rest === "" && toRoman(total) === s ? total : 0;
}

module.exports = { toRoman, fromRoman };
