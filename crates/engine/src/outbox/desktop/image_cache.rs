//! Local copies of results' images, for the freedesktop `image-path` hint (which takes a
//! `file://` URI, not an `https` one). One GET per image URL, bounded in time and size; a copy is
//! named by the hash of its URL, so a repeat of a notification reuses it; the folder keeps the
//! newest `KEPT` copies. Anything that goes wrong (no answer in time, not an image, too large, a
//! full disk) leaves the notification without its image, never without the notification.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

/// Longest wait for an image: the notification is shown after it.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest image copied.
pub const MAX_BYTES: usize = 4 * 1024 * 1024;
/// Copies kept in the folder (the oldest are removed).
const KEPT: usize = 64;

pub struct ImageCache {
    dir: PathBuf,
    http: reqwest::Client,
}

impl ImageCache {
    /// The cache in the system's temporary folder (`$TMPDIR/nevermiss-notification-images`).
    pub fn in_temp_dir() -> ImageCache {
        ImageCache::at(std::env::temp_dir().join("nevermiss-notification-images"))
    }

    pub fn at(dir: PathBuf) -> ImageCache {
        let http = reqwest::Client::builder().timeout(FETCH_TIMEOUT).build().unwrap_or_default();
        ImageCache { dir, http }
    }

    /// The local copy of the image at `url`, fetched now if there is none; `None` when it cannot
    /// be had (logged).
    pub async fn local_copy(&self, url: &str) -> Option<PathBuf> {
        let name = hex::encode(Sha256::digest(url.as_bytes()));
        let path = self.dir.join(&name);
        if tokio::fs::metadata(&path).await.is_ok() {
            return Some(path);
        }
        match self.fetch(url).await {
            Ok(bytes) => match self.store(&name, &bytes).await {
                Ok(()) => Some(path),
                Err(e) => {
                    tracing::debug!(error = %e, "cannot keep a notification image");
                    None
                }
            },
            Err(why) => {
                tracing::debug!(why, "the notification goes without its image");
                None
            }
        }
    }

    async fn fetch(&self, url: &str) -> Result<Vec<u8>, String> {
        let mut response = self.http.get(url).send().await.map_err(|e| e.without_url().to_string())?;
        if !response.status().is_success() {
            return Err(format!("the image URL answered {}", response.status()));
        }
        let content_type = response.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
        if !content_type.starts_with("image/") {
            return Err(format!("not an image ({content_type:?})"));
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| e.without_url().to_string())? {
            if bytes.len() + chunk.len() > MAX_BYTES {
                return Err(format!("the image is over {MAX_BYTES} bytes"));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }

    /// Writes a copy (whole or not at all: written aside, then renamed) and trims the folder.
    async fn store(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        tokio::fs::create_dir_all(&self.dir).await?;
        let partial = self.dir.join(format!(".{name}.partial"));
        tokio::fs::write(&partial, bytes).await?;
        tokio::fs::rename(&partial, self.dir.join(name)).await?;
        let dir = self.dir.clone();
        let _ = tokio::task::spawn_blocking(move || trim(&dir, KEPT)).await;
        Ok(())
    }
}

/// Removes the oldest files of `dir` beyond `kept`.
fn trim(dir: &Path, kept: usize) -> std::io::Result<()> {
    let mut files: Vec<(std::time::SystemTime, PathBuf)> =
        std::fs::read_dir(dir)?.filter_map(Result::ok).filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path()))).collect();
    if files.len() <= kept {
        return Ok(());
    }
    files.sort();
    for (_, path) in &files[..files.len() - kept] {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folder_keeps_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..10 {
            let path = dir.path().join(format!("f{i}"));
            std::fs::write(&path, b"x").unwrap();
            let at = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 + i);
            std::fs::File::options().write(true).open(&path).unwrap().set_modified(at).unwrap();
        }
        trim(dir.path(), 4).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, ["f6", "f7", "f8", "f9"]);
    }
}
