//! File operations relative to an open folder that never follow a symbolic link: every
//! component of a path is opened with `O_NOFOLLOW | O_DIRECTORY` from the folder before it, so
//! a link planted anywhere on the way stops the walk instead of carrying it elsewhere, and a
//! folder swapped for a link after it was opened changes nothing (the handle is to the folder).
//!
//! New files and links are made under a fresh name in their folder, exclusively
//! (`O_CREAT | O_EXCL | O_NOFOLLOW`: a link planted at that name makes the creation fail, never
//! a write through it), then renamed over their target. Regular files are copied sparsely
//! (`SEEK_DATA`/`SEEK_HOLE`) and never keep a set-id or sticky bit.
//!
//! The layer's copy-back and its undo ([`crate::sandbox::Layer`]) write the workspace through
//! these calls.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, SeekFrom};

/// An open folder.
#[derive(Debug)]
pub struct Folder(OwnedFd);

/// Where a walk down a path ended.
#[derive(Debug)]
pub enum Walk {
    /// The folder at the path.
    Found(Folder),
    /// A component does not exist (and was not to be made).
    Missing,
    /// The component at this index is a symbolic link.
    Link(usize),
    /// The component at this index is not a folder.
    NotFolder(usize),
}

/// What an entry of a folder is, not following a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A folder.
    Folder,
    /// A symbolic link.
    Link,
    /// A device, FIFO or socket.
    Other,
}

const DIR_FLAGS: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

/// Folders a copy makes: `rwxr-xr-x` before the umask, as `mkdir` does.
const FOLDER_MODE: u32 = 0o755;

fn kind_of(mode: u32) -> Kind {
    match FileType::from_raw_mode(mode) {
        FileType::RegularFile => Kind::File,
        FileType::Directory => Kind::Folder,
        FileType::Symlink => Kind::Link,
        _ => Kind::Other,
    }
}

impl Folder {
    /// Opens `path` as the folder walks start from (the caller's own path: a workspace, a
    /// layer), as it is.
    pub fn open(path: &Path) -> io::Result<Self> {
        let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        Ok(Self(fd))
    }

    /// The folder `name` in this one, not through a link.
    pub fn child(&self, name: &OsStr) -> io::Result<Self> {
        Ok(Self(rustix::fs::openat(&self.0, name, DIR_FLAGS, Mode::empty())?))
    }

    /// Walks down `parts` from here, each a real folder; with `make`, a missing folder is made.
    pub fn walk<S: AsRef<OsStr>>(&self, parts: &[S], make: bool) -> io::Result<Walk> {
        let mut at = Self(self.0.try_clone()?);
        for (i, part) in parts.iter().enumerate() {
            let name = part.as_ref();
            match at.kind(name)? {
                None if make => match rustix::fs::mkdirat(&at.0, name, Mode::from_raw_mode(FOLDER_MODE)) {
                    Ok(()) => {}
                    Err(e) if e == rustix::io::Errno::EXIST => {}
                    Err(e) => return Err(e.into()),
                },
                None => return Ok(Walk::Missing),
                Some(Kind::Link) => return Ok(Walk::Link(i)),
                Some(Kind::Folder) => {}
                Some(_) => return Ok(Walk::NotFolder(i)),
            }
            at = match at.child(name) {
                Ok(next) => next,
                // Swapped for a link or a file since it was looked at.
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => return Ok(Walk::Link(i)),
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) => {
                    return Ok(Walk::NotFolder(i));
                }
                Err(e) => return Err(e),
            };
        }
        Ok(Walk::Found(at))
    }

    /// What `name` is here, or `None` when nothing is.
    pub fn kind(&self, name: &OsStr) -> io::Result<Option<Kind>> {
        self.stat(name).map(|s| s.map(|s| kind_of(s.st_mode)))
    }

    /// `lstat` of `name` here, or `None` when nothing is.
    pub fn stat(&self, name: &OsStr) -> io::Result<Option<rustix::fs::Stat>> {
        match rustix::fs::statat(&self.0, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(stat)),
            Err(e) if e == rustix::io::Errno::NOENT => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The names in this folder with what each is, sorted by name.
    pub fn entries(&self) -> io::Result<Vec<(PathBuf, Kind)>> {
        let mut out = Vec::new();
        for entry in rustix::fs::Dir::read_from(&self.0)? {
            let entry = entry?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            let kind = match self.kind(name)? {
                Some(kind) => kind,
                None => continue,
            };
            out.push((PathBuf::from(name), kind));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Removes `name` here, whatever it is (a folder with all it holds), never following a
    /// link; true when something was there.
    pub fn remove(&self, name: &OsStr) -> io::Result<bool> {
        match self.kind(name)? {
            None => Ok(false),
            Some(Kind::Folder) => {
                let inner = self.child(name)?;
                for (entry, _) in inner.entries()? {
                    inner.remove(entry.as_os_str())?;
                }
                rustix::fs::unlinkat(&self.0, name, AtFlags::REMOVEDIR)?;
                Ok(true)
            }
            Some(_) => {
                rustix::fs::unlinkat(&self.0, name, AtFlags::empty())?;
                Ok(true)
            }
        }
    }

    /// Makes the folder `name` here unless one is there (whatever else is there is removed
    /// first); returns it.
    pub fn make_folder(&self, name: &OsStr) -> io::Result<Folder> {
        match self.kind(name)? {
            Some(Kind::Folder) => {}
            Some(_) => {
                self.remove(name)?;
                rustix::fs::mkdirat(&self.0, name, Mode::from_raw_mode(FOLDER_MODE))?;
            }
            None => rustix::fs::mkdirat(&self.0, name, Mode::from_raw_mode(FOLDER_MODE))?,
        }
        self.child(name)
    }

    /// Where the link `name` here points.
    pub fn read_link(&self, name: &OsStr) -> io::Result<PathBuf> {
        let target = rustix::fs::readlinkat(&self.0, name, Vec::new())?;
        Ok(PathBuf::from(OsStr::from_bytes(target.as_bytes())))
    }

    /// The regular file `name` here, opened for reading, not through a link (a FIFO or device
    /// is refused without blocking on it).
    pub fn open_file(&self, name: &OsStr) -> io::Result<File> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.0, name, flags, Mode::empty())?;
        let stat = rustix::fs::fstat(&fd)?;
        if kind_of(stat.st_mode) != Kind::File {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
        }
        Ok(File::from(fd))
    }

    /// Writes `name` here as a copy of `from` (sparse where `from` has holes) with the
    /// permission bits of `mode` but no set-id or sticky bit: made under a fresh name,
    /// exclusively, then renamed over whatever file or link `name` was (a folder there is
    /// removed first).
    pub fn write_copy(&self, name: &OsStr, from: &File, mode: u32) -> io::Result<()> {
        if self.kind(name)? == Some(Kind::Folder) {
            self.remove(name)?;
        }
        let (temp, file) = self.create_fresh()?;
        let written = copy_sparse(from, &file)
            .and_then(|()| rustix::fs::fchmod(&file, Mode::from_raw_mode(mode & 0o777)).map_err(io::Error::from))
            .and_then(|()| rustix::fs::renameat(&self.0, &temp, &self.0, name).map_err(io::Error::from));
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.0, &temp, AtFlags::empty());
        }
        written
    }

    /// Makes `name` here a symbolic link to `target`: made under a fresh name, then renamed over
    /// whatever file or link `name` was (a folder there is removed first).
    pub fn write_link(&self, name: &OsStr, target: &Path) -> io::Result<()> {
        if self.kind(name)? == Some(Kind::Folder) {
            self.remove(name)?;
        }
        for _ in 0..16 {
            let temp = fresh_name();
            match rustix::fs::symlinkat(target, &self.0, &temp) {
                Ok(()) => {
                    return rustix::fs::renameat(&self.0, &temp, &self.0, name).map_err(|e| {
                        let _ = rustix::fs::unlinkat(&self.0, &temp, AtFlags::empty());
                        e.into()
                    });
                }
                Err(e) if e == rustix::io::Errno::EXIST => {}
                Err(e) => return Err(e.into()),
            }
        }
        Err(io::Error::new(io::ErrorKind::AlreadyExists, "no fresh name for a temporary link"))
    }

    /// A new empty file under a fresh name here, made exclusively: its name and the file.
    fn create_fresh(&self) -> io::Result<(PathBuf, File)> {
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        for _ in 0..16 {
            let temp = fresh_name();
            match rustix::fs::openat(&self.0, &temp, flags, Mode::from_raw_mode(0o600)) {
                Ok(fd) => return Ok((temp, File::from(fd))),
                Err(e) if e == rustix::io::Errno::EXIST => {}
                Err(e) => return Err(e.into()),
            }
        }
        Err(io::Error::new(io::ErrorKind::AlreadyExists, "no fresh name for a temporary file"))
    }
}

impl AsFd for Folder {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// The text of the regular file `path`, read without blocking on what is not one (a FIFO, a
/// device) and without following a link at its last component, if it holds at most `max`
/// bytes: for the files loopwright reads back from its state folder, which anyone who can
/// write the workspace can replace.
pub fn read_small(path: &Path, max: u64) -> io::Result<String> {
    use std::io::Read;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::open(path, flags, Mode::empty())?;
    let stat = rustix::fs::fstat(&fd)?;
    if kind_of(stat.st_mode) != Kind::File {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
    }
    if u64::try_from(stat.st_size).unwrap_or(u64::MAX) > max {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("larger than {max} bytes")));
    }
    let mut text = String::new();
    File::from(fd).take(max).read_to_string(&mut text)?;
    Ok(text)
}

/// An unpredictable name for a temporary entry: `.loopwright-` and 128 random bits in hex.
fn fresh_name() -> PathBuf {
    use std::hash::{BuildHasher, Hasher};
    let mut bits = String::new();
    for _ in 0..2 {
        // Each `RandomState` is seeded from the operating system's randomness.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
        bits.push_str(&format!("{:016x}", h.finish()));
    }
    PathBuf::from(format!(".loopwright-{bits}.tmp"))
}

/// Copies all of `from` into `to` (empty), writing only its data: a hole in `from` stays a
/// hole in `to`, so a sparse file costs on disk what it did in the layer.
pub fn copy_sparse(from: &File, to: &File) -> io::Result<()> {
    let len = from.metadata()?.len();
    let mut buf = vec![0u8; 256 * 1024];
    let mut pos = 0u64;
    while pos < len {
        let data = match rustix::fs::seek(from, SeekFrom::Data(pos)) {
            Ok(at) => at,
            // No data after `pos`: the rest is a hole.
            Err(e) if e == rustix::io::Errno::NXIO => break,
            // A file system that cannot say: all of it is data.
            Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::OPNOTSUPP => pos,
            Err(e) => return Err(e.into()),
        };
        let hole = match rustix::fs::seek(from, SeekFrom::Hole(data)) {
            Ok(at) => at.min(len),
            Err(_) => len,
        };
        let mut at = data;
        while at < hole {
            let want = usize::try_from((hole - at).min(buf.len() as u64)).unwrap_or(buf.len());
            let n = from.read_at(&mut buf[..want], at)?;
            if n == 0 {
                break;
            }
            to.write_all_at(&buf[..n], at)?;
            at += n as u64;
        }
        pos = hole.max(data + 1).max(at);
    }
    to.set_len(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_stops_at_a_link_or_a_file_and_makes_missing_folders_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/f"), "x").unwrap();
        std::os::unix::fs::symlink("/", root.join("a/l")).unwrap();
        let top = Folder::open(root).unwrap();
        assert!(matches!(top.walk(&["a", "b"], false).unwrap(), Walk::Found(_)));
        assert!(matches!(top.walk(&["a", "l", "etc"], true).unwrap(), Walk::Link(1)));
        assert!(matches!(top.walk(&["a", "f", "x"], true).unwrap(), Walk::NotFolder(1)));
        assert!(matches!(top.walk(&["a", "new"], false).unwrap(), Walk::Missing));
        assert!(matches!(top.walk(&["a", "new", "deeper"], true).unwrap(), Walk::Found(_)));
        assert!(root.join("a/new/deeper").is_dir());
    }

    #[test]
    fn a_copy_keeps_holes_drops_set_id_bits_and_replaces_a_planted_link_without_following_it() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = dir.path();
        let sparse = root.join("sparse.src");
        let f = File::create(&sparse).unwrap();
        f.set_len(64 * 1024 * 1024).unwrap();
        f.write_all_at(b"end", 64 * 1024 * 1024 - 3).unwrap();
        std::fs::write(outside.path().join("victim"), "keep").unwrap();
        std::os::unix::fs::symlink(outside.path().join("victim"), root.join("target")).unwrap();
        let top = Folder::open(root).unwrap();
        let from = top.open_file(OsStr::new("sparse.src")).unwrap();
        top.write_copy(OsStr::new("target"), &from, 0o6755).unwrap();
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(root.join("target")).unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.mode() & 0o7777, 0o755);
        assert_eq!(meta.len(), 64 * 1024 * 1024);
        assert!(meta.blocks() * 512 < 1024 * 1024, "{} blocks", meta.blocks());
        assert_eq!(std::fs::read_to_string(outside.path().join("victim")).unwrap(), "keep");
        let mut end = [0u8; 3];
        File::open(root.join("target")).unwrap().read_exact_at(&mut end, 64 * 1024 * 1024 - 3).unwrap();
        assert_eq!(&end, b"end");
        // No temporary file is left.
        let names: Vec<PathBuf> = top.entries().unwrap().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, [PathBuf::from("sparse.src"), PathBuf::from("target")]);
    }

    #[test]
    fn a_small_read_refuses_a_fifo_a_link_and_a_large_file_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let (fifo, link, big, fine) =
            (dir.path().join("fifo"), dir.path().join("link"), dir.path().join("big"), dir.path().join("fine"));
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        std::fs::write(&fine, "ok").unwrap();
        std::os::unix::fs::symlink(&fine, &link).unwrap();
        std::fs::write(&big, vec![b'x'; 2048]).unwrap();
        assert_eq!(read_small(&fine, 1024).unwrap(), "ok");
        for refused in [&fifo, &link, &big] {
            assert!(read_small(refused, 1024).is_err(), "{}", refused.display());
        }
    }

    #[test]
    fn removing_a_folder_never_follows_a_link_inside_it() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("victim"), "keep").unwrap();
        std::fs::create_dir_all(dir.path().join("x/y")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("x/y/out")).unwrap();
        let top = Folder::open(dir.path()).unwrap();
        assert!(top.remove(OsStr::new("x")).unwrap());
        assert!(!dir.path().join("x").exists());
        assert_eq!(std::fs::read_to_string(outside.path().join("victim")).unwrap(), "keep");
    }
}
