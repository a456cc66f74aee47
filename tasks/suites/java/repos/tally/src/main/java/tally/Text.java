package tally;

import java.util.ArrayList;
import java.util.List;

/** Text layout. */
public final class Text {
    private Text() {}

    /**
     * {@code text} split into lines of at most {@code width} characters, breaking between words; a longer
     * word stands on a line of its own.
     */
    public static List<String> wrap(String text, int width) {
        List<String> lines = new ArrayList<>();
        String line = "";
        for (String word : text.trim().split("\\s+")) {
            if (word.isEmpty()) {
                continue;
            }
            int needed = word.length() + (line.isEmpty() ? 0 : line.length() + 1);
            if (needed <= width || line.isEmpty()) {
                line = line.isEmpty() ? word : line + " " + word;
            } else {
                lines.add(line);
                line = word;
            }
        }
        if (!line.isEmpty()) {
            lines.add(line);
        }
        return lines;
    }
}
