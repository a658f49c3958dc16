//! The data dir is the user's alone: the folder 0700, every file the engine keeps in
//! it 0600 (the database and its `-wal` and `-shm`, the API token, the node id, `instance.json`,
//! the lock, the file secret store, a tunnel's config). A new data dir is made so; an existing
//! one is set so at start, said once in the log.
//!
//! On Windows the same with access control lists (`owner_only`): the folder and each of those
//! files get a protected DACL (nothing inherited from the user profile's folder above it) whose
//! one entry gives the user running NeverMiss full control; the folder's entry is inherited by
//! what is made in it. An existing folder or file whose DACL lets anyone else in is set so at
//! start, as on Unix. Elsewhere (neither Unix nor Windows) these are no-ops.
//!
//! SQLite makes `-wal` and `-shm` with the permissions of the database file itself, so the
//! database file is made (empty, 0600) before SQLite first opens it, and the three are set to
//! 0600 again once it has.

use std::path::{Path, PathBuf};

pub const TOKEN_FILE: &str = "api-token";
pub const INSTANCE_FILE: &str = "instance.json";
/// This engine's name among a fleet's (`serve --database`): who holds a lease or claimed an
/// outbox row. Random, made once per data dir (one engine per data dir), so a restarted engine
/// takes back what it held.
pub const NODE_FILE: &str = "node-id";
pub const DATABASE_FILE: &str = "nevermiss.db";
/// Held (an exclusive OS file lock) by the one engine running on a data dir, for its whole life;
/// the OS releases it when the process ends, however it ends.
pub const LOCK_FILE: &str = "engine.lock";

/// The page `nevermiss open` starts the browser on (0600): it holds a one-time code for the UI,
/// which must never be on a command line.
pub const OPEN_PAGE: &str = "open-ui.html";

/// The ngrok agent's config file (no secret in it: only where the agent's local API listens).
pub const NGROK_CONFIG_FILE: &str = "tunnel-ngrok.yml";

/// The files of a data dir the engine writes, besides the database's (`database_files`).
pub const KEPT_FILES: &[&str] = &[TOKEN_FILE, NODE_FILE, INSTANCE_FILE, LOCK_FILE, OPEN_PAGE, crate::secrets::FILE_NAME, NGROK_CONFIG_FILE];

/// The SQLite database at `db` and the two files SQLite keeps beside it in WAL mode.
pub fn database_files(db: &Path) -> [PathBuf; 3] {
    let with = |suffix: &str| {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    [db.to_owned(), with("-wal"), with("-shm")]
}

/// Creates `dir` (and its missing parents) with the folder itself 0700, or sets an existing one
/// to 0700 (logged once, with what it was).
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => {}
            Err(e) => return Err(e),
        }
        let mode = std::fs::metadata(dir)?.permissions().mode() & 0o777;
        if mode != 0o700 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
            tracing::info!(data_dir = %dir.display(), was = format!("{mode:o}"), "the data dir was open to other users: set to 0700");
        }
        Ok(())
    }
    #[cfg(windows)]
    {
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        let created = match std::fs::create_dir(dir) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => false,
            Err(e) => return Err(e),
        };
        if created {
            crate::owner_only::set(dir, true)?;
        } else if !crate::owner_only::is(dir)? {
            crate::owner_only::set(dir, true)?;
            tracing::info!(data_dir = %dir.display(), "the data dir was open to other users: set to its owner only (ACL)");
        }
        Ok(())
    }
    #[cfg(not(any(unix, windows)))]
    std::fs::create_dir_all(dir)
}

/// Sets `file` to 0600 if it exists and is not; whether it was changed.
pub fn make_private(file: &Path) -> std::io::Result<bool> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = match std::fs::symlink_metadata(file) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        if !meta.file_type().is_file() || meta.permissions().mode() & 0o777 == 0o600 {
            return Ok(false);
        }
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600))?;
        Ok(true)
    }
    #[cfg(windows)]
    {
        match std::fs::symlink_metadata(file) {
            Ok(meta) if meta.file_type().is_file() => {}
            Ok(_) => return Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        }
        if crate::owner_only::is(file)? {
            return Ok(false);
        }
        crate::owner_only::set(file, false)?;
        Ok(true)
    }
    #[cfg(not(any(unix, windows)))]
    {
        let _ = file;
        Ok(false)
    }
}

/// What a private file is, as the log says it.
const PRIVATE_FILE: &str = if cfg!(windows) { "its owner only, by its ACL" } else { "0600" };

/// Sets every file the engine keeps in `dir` (and the database at `db`, when SQLite) to 0600;
/// logged once when any was open to others.
pub fn make_files_private(dir: &Path, db: Option<&Path>) {
    let mut files: Vec<PathBuf> = KEPT_FILES.iter().map(|f| dir.join(f)).collect();
    files.extend(db.into_iter().flat_map(database_files));
    let mut fixed = Vec::new();
    for file in &files {
        match make_private(file) {
            Ok(true) => fixed.push(file.file_name().unwrap_or_default().to_string_lossy().into_owned()),
            Ok(false) => {}
            Err(e) => tracing::warn!(file = %file.display(), error = %e, "cannot make a data dir file private ({PRIVATE_FILE})"),
        }
    }
    if !fixed.is_empty() {
        tracing::info!(data_dir = %dir.display(), files = fixed.join(", "), "data dir files were readable by other users: set to {PRIVATE_FILE}");
    }
}

/// Makes the SQLite database file at `db` before SQLite does, empty and 0600, so that SQLite
/// gives its `-wal` and `-shm` the same mode. An existing file is left as it is.
pub fn create_private_database(db: &Path) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    match options.open(db) {
        Ok(_) => {
            #[cfg(windows)]
            crate::owner_only::set(db, false)?;
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_new_dir_is_0700_and_an_open_one_is_closed() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a").join("data");
        create_private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        create_private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
    }

    #[test]
    fn the_database_files_are_named_beside_it() {
        let [db, wal, shm] = database_files(Path::new("/d/nevermiss.db"));
        assert_eq!(
            (db.to_str(), wal.to_str(), shm.to_str()),
            (Some("/d/nevermiss.db"), Some("/d/nevermiss.db-wal"), Some("/d/nevermiss.db-shm"))
        );
    }
}
