//! The real connection setup (`--setup tls`): a TLS 1.3 handshake (rustls on ring, a
//! certificate made at start) followed by a SCRAM-SHA-256 exchange (RFC 5802 / 7677 messages,
//! ring's PBKDF2, HMAC and SHA-256), both sides.
//!
//! The server keeps the user's password and derives the salted password with PBKDF2 at 4096
//! iterations (PostgreSQL's default) on every login, as a server that hashes the password at
//! login does: that is the setup's big CPU call, one call of a few ms that never yields. The
//! client caches its salted password (RFC 5802 allows it), so the clients' process, which
//! shares this machine's cores, spends little.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ring::{digest, hmac, pbkdf2, rand::SecureRandom};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// PBKDF2 iterations of the salted password: PostgreSQL's default for SCRAM-SHA-256.
pub const ITERATIONS: u32 = 4096;
const USER: &str = "storm";
const PASSWORD: &[u8] = b"correct horse battery staple";
const NONCE_LEN: usize = 18;

/// The server's half: its TLS configuration and the user's credentials.
pub struct ServerSide {
    /// Accepts TLS 1.3 with the generated certificate.
    pub acceptor: TlsAcceptor,
    salt: [u8; 16],
    /// The certificate the clients trust (DER).
    pub cert: Vec<u8>,
}

/// A setup that failed: the peer went away or broke the protocol.
#[derive(Debug)]
pub struct Failed(pub String);

impl<E: std::fmt::Display> From<E> for Failed {
    fn from(e: E) -> Failed {
        Failed(e.to_string())
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl ServerSide {
    /// A self-signed ECDSA P-256 certificate for `localhost`, and a random salt.
    pub fn new() -> Result<ServerSide, String> {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
            .map_err(|e| format!("certificate: {e}"))?;
        let cert = ck.cert.der().to_vec();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(vec![CertificateDer::from(cert.clone())], key)
            .map_err(|e| format!("server config: {e}"))?;
        let mut salt = [0u8; 16];
        ring::rand::SystemRandom::new()
            .fill(&mut salt)
            .map_err(|_| "no randomness")?;
        Ok(ServerSide {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            salt,
            cert,
        })
    }

    /// The server's side of SCRAM-SHA-256 on an established TLS stream: verify the client's
    /// proof (deriving the salted password, the expensive part), answer with the server's
    /// signature.
    pub async fn scram<S: AsyncRead + AsyncWrite + Unpin>(&self, s: &mut S) -> Result<(), Failed> {
        let client_first = read_msg(s).await?;
        let bare = client_first
            .strip_prefix("n,,")
            .ok_or_else(|| Failed("no gs2 header".into()))?
            .to_string();
        let cnonce = attr(&bare, "r")?;
        let nonce = format!("{cnonce}{}", random_nonce()?);
        let server_first = format!("r={nonce},s={},i={ITERATIONS}", B64.encode(self.salt));
        write_msg(s, &server_first).await?;
        let client_final = read_msg(s).await?;
        let (without_proof, proof) = client_final
            .rsplit_once(",p=")
            .ok_or_else(|| Failed("no proof".into()))?;
        if attr(without_proof, "r")? != nonce {
            return Err(Failed("nonce mismatch".into()));
        }
        let proof = B64.decode(proof)?;
        let auth = format!("{bare},{server_first},{without_proof}");
        let keys = Keys::derive(PASSWORD, &self.salt, ITERATIONS);
        let signature = hmac_sha256(&keys.stored_key, auth.as_bytes());
        if proof.len() != signature.len() {
            return Err(Failed("bad proof".into()));
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        if digest::digest(&digest::SHA256, &client_key).as_ref() != keys.stored_key {
            return Err(Failed("wrong password".into()));
        }
        let server_sig = hmac_sha256(&keys.server_key, auth.as_bytes());
        write_msg(s, &format!("v={}", B64.encode(server_sig))).await?;
        Ok(())
    }
}

/// The client's half: trusts the server's certificate, caches its salted password.
pub struct ClientSide {
    connector: TlsConnector,
    /// The client derives its keys once per salt and iteration count.
    cache: Mutex<Option<CachedKeys>>,
}

impl ClientSide {
    /// A client trusting `cert` (DER), with no TLS session resumption.
    pub fn new(cert: &[u8]) -> Result<ClientSide, String> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from(cert.to_vec()))
            .map_err(|e| format!("trust: {e}"))?;
        let mut config = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        // Every attempt is a full handshake, as from a client that restarted.
        config.resumption = rustls::client::Resumption::disabled();
        Ok(ClientSide {
            connector: TlsConnector::from(Arc::new(config)),
            cache: Mutex::new(None),
        })
    }

    /// TLS, then SCRAM, on a connected socket.
    pub async fn connect<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        sock: S,
    ) -> Result<tokio_rustls::client::TlsStream<S>, Failed> {
        let name = ServerName::try_from("localhost")?;
        let mut s = self.connector.connect(name, sock).await?;
        let cnonce = random_nonce()?;
        let bare = format!("n={USER},r={cnonce}");
        write_msg(&mut s, &format!("n,,{bare}")).await?;
        let server_first = read_msg(&mut s).await?;
        let nonce = attr(&server_first, "r")?;
        if !nonce.starts_with(&cnonce) {
            return Err(Failed("nonce mismatch".into()));
        }
        let salt = B64.decode(attr(&server_first, "s")?)?;
        let iterations: u32 = attr(&server_first, "i")?.parse()?;
        let keys = self.keys(&salt, iterations);
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{bare},{server_first},{without_proof}");
        let signature = hmac_sha256(&keys.stored_key, auth.as_bytes());
        let proof: Vec<u8> = keys
            .client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        write_msg(&mut s, &format!("{without_proof},p={}", B64.encode(proof))).await?;
        let server_final = read_msg(&mut s).await?;
        let expected = hmac_sha256(&keys.server_key, auth.as_bytes());
        if B64.decode(attr(&server_final, "v")?)? != expected {
            return Err(Failed("server signature mismatch".into()));
        }
        Ok(s)
    }

    fn keys(&self, salt: &[u8], iterations: u32) -> Arc<Keys> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((s, i, k)) = cache.as_ref() {
            if s == salt && *i == iterations {
                return k.clone();
            }
        }
        let keys = Arc::new(Keys::derive(PASSWORD, salt, iterations));
        *cache = Some((salt.to_vec(), iterations, keys.clone()));
        keys
    }
}

/// Keys derived for a salt and an iteration count.
type CachedKeys = (Vec<u8>, u32, Arc<Keys>);

/// SCRAM's keys from the salted password.
struct Keys {
    client_key: Vec<u8>,
    stored_key: Vec<u8>,
    server_key: Vec<u8>,
}

impl Keys {
    fn derive(password: &[u8], salt: &[u8], iterations: u32) -> Keys {
        let mut salted = [0u8; 32];
        let n = NonZeroU32::new(iterations).unwrap_or(NonZeroU32::MIN);
        pbkdf2::derive(pbkdf2::PBKDF2_HMAC_SHA256, n, salt, password, &mut salted);
        let client_key = hmac_sha256(&salted, b"Client Key");
        Keys {
            stored_key: digest::digest(&digest::SHA256, &client_key)
                .as_ref()
                .to_vec(),
            server_key: hmac_sha256(&salted, b"Server Key"),
            client_key,
        }
    }
}

fn hmac_sha256(key: &[u8], msg: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), msg)
        .as_ref()
        .to_vec()
}

fn random_nonce() -> Result<String, Failed> {
    let mut n = [0u8; NONCE_LEN];
    ring::rand::SystemRandom::new()
        .fill(&mut n)
        .map_err(|_| Failed("no randomness".into()))?;
    Ok(B64.encode(n))
}

/// The value of `key=` in a SCRAM message.
fn attr<'a>(msg: &'a str, key: &str) -> Result<&'a str, Failed> {
    msg.split(',')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .ok_or_else(|| Failed(format!("no {key}= in {msg:?}")))
}

/// Longest SCRAM message accepted: a peer cannot make the server buffer more.
const MAX_MSG: usize = 512;

/// Messages are framed with a 2-byte length (as a SASL exchange is inside its protocol's
/// messages).
async fn write_msg<S: AsyncWrite + Unpin>(s: &mut S, msg: &str) -> Result<(), Failed> {
    let len = u16::try_from(msg.len())?;
    let mut buf = Vec::with_capacity(2 + msg.len());
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(msg.as_bytes());
    s.write_all(&buf).await?;
    s.flush().await?;
    Ok(())
}

async fn read_msg<S: AsyncRead + Unpin>(s: &mut S) -> Result<String, Failed> {
    let mut len = [0u8; 2];
    s.read_exact(&mut len).await?;
    let len = u16::from_le_bytes(len) as usize;
    if len > MAX_MSG {
        return Err(Failed(format!("message of {len} bytes")));
    }
    let mut buf = vec![0u8; len];
    s.read_exact(&mut buf).await?;
    Ok(String::from_utf8(buf)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_client_with_the_password_sets_up_and_is_verified() {
        let server = ServerSide::new().unwrap();
        let client = ClientSide::new(&server.cert).unwrap();
        let (a, b) = tokio::io::duplex(64 * 1024);
        let srv = async {
            let mut s = server.acceptor.accept(a).await?;
            server.scram(&mut s).await
        };
        let (s, c) = tokio::join!(srv, client.connect(b));
        s.unwrap();
        c.unwrap();
    }
}
