//! A postfix (reverse Polish) calculator over 64-bit integers.

#[derive(Debug, PartialEq, Eq)]
pub enum RpnError {
    /// An operator found fewer than two operands.
    StackUnderflow,
    /// A token that is neither an integer nor an operator.
    BadToken(String),
    /// The expression left other than exactly one value.
    Leftover(usize),
    DivisionByZero,
}

/// Evaluates `expr`: integers and `+ - * /`, separated by whitespace.
pub fn eval(expr: &str) -> Result<i64, RpnError> {
    let mut stack: Vec<i64> = Vec::new();
    for token in expr.split_whitespace() {
        if let Ok(n) = token.parse::<i64>() {
            stack.push(n);
            continue;
        }
        let right = stack.pop().ok_or(RpnError::StackUnderflow)?;
        let left = stack.pop().ok_or(RpnError::StackUnderflow)?;
        let value = match token {
            "+" => left + right,
            "-" => left - right,
            "*" => left * right,
            "/" => {
                if right == 0 {
                    return Err(RpnError::DivisionByZero);
                }
                left / right
            }
            other => return Err(RpnError::BadToken(other.to_string())),
        };
        stack.push(value);
    }
    match stack.len() {
        1 => Ok(stack[0]),
        0 => Err(RpnError::StackUnderflow),
        n => Err(RpnError::Leftover(n)),
    }
}
