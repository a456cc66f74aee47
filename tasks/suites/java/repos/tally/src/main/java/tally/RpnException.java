package tally;

/** Why a postfix expression has no value. */
public class RpnException extends RuntimeException {
    public RpnException(String message) {
        super(message);
    }
}
