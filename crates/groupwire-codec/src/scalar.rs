//! The portable GF(2^8) multiply-accumulate loop: product tables, no
//! vector instructions. The [`Backend::Scalar`](crate::Backend::Scalar)
//! backend, and the tail of the vector ones.

use crate::gf;

/// The portable loop, also the tail of the vector ones.
pub(crate) fn dot_prod_scalar(rows: &[&[u8]], inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
    for (row, out) in rows.iter().zip(outputs.iter_mut()) {
        out.fill(0);
        for (&c, input) in row.iter().zip(inputs) {
            mul_add_scalar(c, input, out);
        }
    }
}

/// `out ^= c * input`.
fn mul_add_scalar(c: u8, input: &[u8], out: &mut [u8]) {
    match c {
        0 => {}
        1 => out.iter_mut().zip(input).for_each(|(o, &x)| *o ^= x),
        _ => {
            let t = &gf::MUL[c as usize];
            out.iter_mut()
                .zip(input)
                .for_each(|(o, &x)| *o ^= t[x as usize]);
        }
    }
}
