//! Typed argument parsers shared by the commands.
//!
//! The libraries own their enums' names (`ALL` and `as_str`/`name`, and a
//! `FromStr` built on them); the CLI turns those into clap parsers that
//! list the values in `--help`, suggest the nearest on a typo, and hand the
//! command a typed value. (clap's `ValueEnum` derive would need the
//! libraries to depend on clap; this keeps them free of it.)

use clap::builder::{PossibleValuesParser, TypedValueParser};

/// A parser accepting exactly the names of `all`, as `name` spells them.
pub(crate) fn one_of<T, const N: usize>(
    all: [T; N],
    name: fn(T) -> &'static str,
) -> impl TypedValueParser<Value = T>
where
    T: Copy + Send + Sync + 'static,
{
    PossibleValuesParser::new(all.map(name)).map(move |s| {
        all.into_iter()
            .find(|v| name(*v) == s)
            .expect("PossibleValuesParser passes only listed names")
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::one_of;

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Mode {
        Fast,
        Safe,
    }

    fn name(m: Mode) -> &'static str {
        match m {
            Mode::Fast => "fast",
            Mode::Safe => "safe",
        }
    }

    #[derive(Parser)]
    struct Args {
        #[arg(long, value_parser = one_of([Mode::Fast, Mode::Safe], name))]
        mode: Mode,
    }

    #[test]
    fn parses_listed_names_and_refuses_others_naming_the_choices() {
        let a = Args::try_parse_from(["x", "--mode", "safe"]).expect("listed");
        assert_eq!(a.mode, Mode::Safe);
        let err = Args::try_parse_from(["x", "--mode", "quick"])
            .err()
            .expect("not listed")
            .to_string();
        assert!(err.contains("fast") && err.contains("safe"), "{err}");
    }
}
