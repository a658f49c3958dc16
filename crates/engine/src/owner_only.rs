//! Windows: a folder or file readable by its owner only, the ACL way (the Unix modes' 0700 and
//! 0600): a protected DACL with one entry, full control for the user this process runs as
//! (inherited by files and folders made inside, for a folder). `is` says whether a path's DACL
//! already lets no one else in: protected (nothing inherited), and every entry that allows
//! anything is for this user.
//! (`data_dir` uses it for the data dir and its files, `secrets::write_private` for each file
//! it writes.)

use std::ffi::c_void;
use std::io;
use std::os::windows::ffi::OsStrExt;
use std::path::Path;
use std::ptr::null_mut;

use windows_sys::Win32::Foundation::{CloseHandle, LocalFree, HANDLE};
use windows_sys::Win32::Security::Authorization::{GetNamedSecurityInfoW, SetNamedSecurityInfoW, SE_FILE_OBJECT};
use windows_sys::Win32::Security::{
    AddAccessAllowedAceEx, EqualSid, GetAce, GetLengthSid, GetSecurityDescriptorControl, GetTokenInformation, InitializeAcl, TokenUser,
    ACCESS_ALLOWED_ACE, ACE_HEADER, ACL, ACL_REVISION, CONTAINER_INHERIT_ACE, DACL_SECURITY_INFORMATION, OBJECT_INHERIT_ACE,
    PROTECTED_DACL_SECURITY_INFORMATION, PSECURITY_DESCRIPTOR, SE_DACL_PROTECTED, TOKEN_QUERY, TOKEN_USER,
};
use windows_sys::Win32::Storage::FileSystem::FILE_ALL_ACCESS;
use windows_sys::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};

/// `ACCESS_ALLOWED_ACE_TYPE`.
const ACCESS_ALLOWED: u8 = 0;
/// The other allow types (compound, object, callback, callback object): read as letting
/// someone else in, whoever they name.
const OTHER_ALLOWS: [u8; 4] = [4, 5, 9, 11];

fn wide(path: &Path) -> Vec<u16> {
    path.as_os_str().encode_wide().chain(std::iter::once(0)).collect()
}

/// The SID of the user this process runs as, in its `TOKEN_USER` buffer (u64s: aligned).
struct User {
    buffer: Vec<u64>,
}

impl User {
    fn current() -> io::Result<User> {
        let mut token: HANDLE = null_mut();
        // SAFETY: plain Win32 calls with valid out-pointers; the token is closed below.
        unsafe {
            if OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &mut token) == 0 {
                return Err(io::Error::last_os_error());
            }
            let mut needed = 0u32;
            GetTokenInformation(token, TokenUser, null_mut(), 0, &mut needed);
            let mut buffer = vec![0u64; (needed as usize).div_ceil(8).max(1)];
            let ok = GetTokenInformation(token, TokenUser, buffer.as_mut_ptr().cast(), (buffer.len() * 8) as u32, &mut needed);
            let error = io::Error::last_os_error();
            CloseHandle(token);
            if ok == 0 {
                return Err(error);
            }
            Ok(User { buffer })
        }
    }

    fn sid(&self) -> *mut c_void {
        // SAFETY: the buffer holds the TOKEN_USER GetTokenInformation wrote; its SID points
        // inside the same buffer, which lives as long as self.
        unsafe { (*self.buffer.as_ptr().cast::<TOKEN_USER>()).User.Sid }
    }
}

/// Sets `path`'s DACL to its owner's alone (protected, one entry: full control for this
/// process's user; inherited by what is made inside, for a folder).
pub fn set(path: &Path, folder: bool) -> io::Result<()> {
    let user = User::current()?;
    // SAFETY: the ACL buffer is sized for the header and one ACE with this SID, u32-aligned;
    // every pointer passed lives until the calls return.
    unsafe {
        let sid_len = GetLengthSid(user.sid()) as usize;
        let size = std::mem::size_of::<ACL>() + std::mem::size_of::<ACCESS_ALLOWED_ACE>() + sid_len;
        let mut buffer = vec![0u32; size.div_ceil(4)];
        let acl = buffer.as_mut_ptr().cast::<ACL>();
        if InitializeAcl(acl, (buffer.len() * 4) as u32, ACL_REVISION) == 0 {
            return Err(io::Error::last_os_error());
        }
        let inherit = if folder { OBJECT_INHERIT_ACE | CONTAINER_INHERIT_ACE } else { 0 };
        if AddAccessAllowedAceEx(acl, ACL_REVISION, inherit, FILE_ALL_ACCESS, user.sid()) == 0 {
            return Err(io::Error::last_os_error());
        }
        let error = SetNamedSecurityInfoW(
            wide(path).as_ptr(),
            SE_FILE_OBJECT,
            DACL_SECURITY_INFORMATION | PROTECTED_DACL_SECURITY_INFORMATION,
            null_mut(),
            null_mut(),
            acl,
            std::ptr::null(),
        );
        if error != 0 {
            return Err(io::Error::from_raw_os_error(error as i32));
        }
    }
    Ok(())
}

/// Whether `path`'s DACL lets no one but this process's user in.
pub fn is(path: &Path) -> io::Result<bool> {
    let user = User::current()?;
    let mut dacl: *mut ACL = null_mut();
    let mut descriptor: PSECURITY_DESCRIPTOR = null_mut();
    // SAFETY: out-pointers are valid; the descriptor is freed with LocalFree as documented,
    // after the last read of the DACL inside it.
    unsafe {
        let error = GetNamedSecurityInfoW(
            wide(path).as_ptr(),
            SE_FILE_OBJECT,
            DACL_SECURITY_INFORMATION,
            null_mut(),
            null_mut(),
            &mut dacl,
            null_mut(),
            &mut descriptor,
        );
        if error != 0 {
            return Err(io::Error::from_raw_os_error(error as i32));
        }
        let answer = (|| {
            // No DACL at all lets everyone in.
            if dacl.is_null() {
                return Ok(false);
            }
            let (mut control, mut revision) = (0u16, 0u32);
            if GetSecurityDescriptorControl(descriptor, &mut control, &mut revision) == 0 {
                return Err(io::Error::last_os_error());
            }
            if control & SE_DACL_PROTECTED == 0 {
                return Ok(false);
            }
            for index in 0..u32::from((*dacl).AceCount) {
                let mut ace: *mut c_void = null_mut();
                if GetAce(dacl, index, &mut ace) == 0 {
                    return Err(io::Error::last_os_error());
                }
                let kind = (*ace.cast::<ACE_HEADER>()).AceType;
                if OTHER_ALLOWS.contains(&kind) {
                    return Ok(false);
                }
                if kind == ACCESS_ALLOWED {
                    let sid = std::ptr::addr_of_mut!((*ace.cast::<ACCESS_ALLOWED_ACE>()).SidStart).cast::<c_void>();
                    if EqualSid(sid, user.sid()) == 0 {
                        return Ok(false);
                    }
                }
            }
            Ok(true)
        })();
        LocalFree(descriptor);
        answer
    }
}
