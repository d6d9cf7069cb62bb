//! A GitHub App's sign-in: an RS256 JSON Web Token made with the App's private key, exchanged
//! for an installation token that is renewed before it expires.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};

use crate::port::ForgeError;

/// The App's key, read from its PEM file.
pub struct AppKey {
    app_id: u64,
    key: RsaKeyPair,
}

impl std::fmt::Debug for AppKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppKey").field("app_id", &self.app_id).finish_non_exhaustive()
    }
}

impl AppKey {
    /// Reads a PEM private key as GitHub hands it out (`BEGIN RSA PRIVATE KEY`, PKCS#1) or as
    /// PKCS#8 (`BEGIN PRIVATE KEY`).
    pub fn from_pem(app_id: u64, pem: &str) -> Result<AppKey, ForgeError> {
        let bad = |why: &str| ForgeError::Setup(format!("the GitHub App's private key: {why}"));
        let (label, der) = pem_body(pem).ok_or_else(|| bad("expected a PEM block (-----BEGIN … PRIVATE KEY-----)"))?;
        let key = match label.as_str() {
            "RSA PRIVATE KEY" => RsaKeyPair::from_der(&der),
            "PRIVATE KEY" => RsaKeyPair::from_pkcs8(&der),
            other => return Err(bad(&format!("expected an RSA private key, found `{other}`"))),
        }
        .map_err(|e| bad(&format!("not a usable RSA key ({e})")))?;
        Ok(AppKey { app_id, key })
    }

    /// A token that signs in as the App for ten minutes from `now` (back-dated one minute for
    /// clocks that run ahead, as GitHub advises).
    pub fn jwt(&self, now: jiff::Timestamp) -> Result<String, ForgeError> {
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
        let iat = now.as_second() - 60;
        let claims = format!(r#"{{"iat":{iat},"exp":{},"iss":"{}"}}"#, iat + 600, self.app_id);
        let signing_input = format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims));
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(&RSA_PKCS1_SHA256, &ring::rand::SystemRandom::new(), signing_input.as_bytes(), &mut signature)
            .map_err(|_| ForgeError::Setup("the GitHub App's key could not sign a token".into()))?;
        Ok(format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature)))
    }
}

/// The label and the decoded bytes of the first PEM block.
fn pem_body(pem: &str) -> Option<(String, Vec<u8>)> {
    let start = pem.find("-----BEGIN ")?;
    let rest = &pem[start + "-----BEGIN ".len()..];
    let label_end = rest.find("-----")?;
    let label = rest[..label_end].to_owned();
    let body_start = &rest[label_end + 5..];
    let end = body_start.find(&format!("-----END {label}-----"))?;
    let b64: String = body_start[..end].chars().filter(|c| !c.is_whitespace()).collect();
    let der = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    Some((label, der))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_that_is_no_rsa_key_is_said_to_be_so() {
        let err = AppKey::from_pem(1, "not a key").expect_err("bad");
        assert_eq!(
            err.to_string(),
            "the GitHub App's private key: expected a PEM block (-----BEGIN … PRIVATE KEY-----)"
        );
        let err = AppKey::from_pem(1, "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n")
            .expect_err("bad");
        assert_eq!(
            err.to_string(),
            "the GitHub App's private key: expected an RSA private key, found `EC PRIVATE KEY`"
        );
    }
}
