package tally;

import java.util.ArrayDeque;
import java.util.Deque;

/** A postfix (reverse Polish) calculator over integers. */
public final class Rpn {
    private Rpn() {}

    /** The value of {@code expr}: integers and + - * /, separated by spaces. */
    public static int eval(String expr) {
        Deque<Integer> stack = new ArrayDeque<>();
        for (String token : expr.trim().split("\\s+")) {
            if (token.matches("-?\\d+")) {
                stack.push(Integer.parseInt(token));
                continue;
            }
            if (stack.size() < 2) {
                throw new RpnException("stack underflow");
            }
            int right = stack.pop();
            int left = stack.pop();
            stack.push(apply(token, left, right));
        }
        if (stack.size() != 1) {
            throw new RpnException("leftover values");
        }
        return stack.pop();
    }

    private static int apply(String token, int left, int right) {
        switch (token) {
            case "+":
                return left + right;
            case "-":
                return left - right;
            case "*":
                return left * right;
            case "/":
                if (right == 0) {
                    throw new RpnException("division by zero");
                }
                return left / right;
            default:
                throw new RpnException("bad token " + token);
        }
    }
}
