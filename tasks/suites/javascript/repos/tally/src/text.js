"use strict";

/** Splits text into lines of at most width characters, breaking between words; a longer word stands on a
 * line of its own. */
function wrap(text, width) {
  const lines = [];
  let line = "";
  for (const word of text.split(/\s+/).filter(Boolean)) {
    const needed = line === "" ? word.length : line.length + 1 + word.length;
    if (needed <= width || line === "") {
      line = line === "" ? word : `${line} ${word}`;
    } else {
      lines.push(line);
      line = word;
    }
  }
  if (line !== "") {
    lines.push(line);
  }
  return lines;
}

module.exports = { wrap };
