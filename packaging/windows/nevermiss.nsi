; NeverMiss's Windows installer (makensis from Debian's nsis; tools/dist builds it, tools/dist-check
; installs it silently under Wine, starts the installed program and uninstalls it again).
;
;   makensis -DVERSION=0.1.0 -DEXE=path\to\nevermiss.exe -DREADME=README.txt -DOUTFILE=setup.exe nevermiss.nsi
;
; Per user, no administrator: the program goes to %LOCALAPPDATA%\Programs\NeverMiss, a Start menu
; folder holds its shortcuts, and the uninstaller is registered under HKCU's Uninstall key (Apps
; and features). The data dir (%APPDATA%\nevermiss) is the user's and is kept by the uninstaller.
; Silent: `setup.exe /S` installs, `uninstall.exe /S` removes.
; A 64-bit installer for the 64-bit program (Debian's nsis has the amd64 stubs): it runs where
; nevermiss.exe runs, and under a 64-bit Wine without its 32-bit half.
Target amd64-unicode
!ifndef VERSION | EXE | README | OUTFILE
  !error "define VERSION, EXE, README and OUTFILE (makensis -DVERSION=... -DEXE=... -DREADME=... -DOUTFILE=...)"
!endif
!define UNINST_KEY "Software\Microsoft\Windows\CurrentVersion\Uninstall\NeverMiss"

Name "NeverMiss ${VERSION}"
OutFile "${OUTFILE}"
RequestExecutionLevel user
InstallDir "$LOCALAPPDATA\Programs\NeverMiss"
InstallDirRegKey HKCU "${UNINST_KEY}" "InstallLocation"
; The smallest by default; `-DCOMPRESSOR=zlib` the fastest (tools/dist's debug packs, for the tests).
!ifdef COMPRESSOR
  SetCompressor ${COMPRESSOR}
!else
  SetCompressor /SOLID lzma
!endif
ShowInstDetails show
ShowUninstDetails show
VIProductVersion "${VERSION}.0"
VIAddVersionKey "ProductName" "NeverMiss"
VIAddVersionKey "FileDescription" "NeverMiss installer"
VIAddVersionKey "ProductVersion" "${VERSION}"
VIAddVersionKey "FileVersion" "${VERSION}"
VIAddVersionKey "LegalCopyright" "MIT License"

Page directory
Page instfiles
UninstPage uninstConfirm
UninstPage instfiles

Section "NeverMiss"
  SetShellVarContext current
  SetOutPath "$INSTDIR"
  File "/oname=nevermiss.exe" "${EXE}"
  File "/oname=README.txt" "${README}"
  WriteUninstaller "$INSTDIR\uninstall.exe"
  CreateDirectory "$SMPROGRAMS\NeverMiss"
  CreateShortcut "$SMPROGRAMS\NeverMiss\NeverMiss.lnk" "$INSTDIR\nevermiss.exe" "serve" "$INSTDIR\nevermiss.exe" 0
  CreateShortcut "$SMPROGRAMS\NeverMiss\NeverMiss web UI.lnk" "$INSTDIR\nevermiss.exe" "open" "$INSTDIR\nevermiss.exe" 0
  CreateShortcut "$SMPROGRAMS\NeverMiss\Uninstall NeverMiss.lnk" "$INSTDIR\uninstall.exe"
  WriteRegStr HKCU "${UNINST_KEY}" "DisplayName" "NeverMiss"
  WriteRegStr HKCU "${UNINST_KEY}" "DisplayVersion" "${VERSION}"
  WriteRegStr HKCU "${UNINST_KEY}" "Publisher" "NeverMiss"
  WriteRegStr HKCU "${UNINST_KEY}" "DisplayIcon" "$INSTDIR\nevermiss.exe"
  WriteRegStr HKCU "${UNINST_KEY}" "InstallLocation" "$INSTDIR"
  WriteRegStr HKCU "${UNINST_KEY}" "UninstallString" '"$INSTDIR\uninstall.exe"'
  WriteRegStr HKCU "${UNINST_KEY}" "QuietUninstallString" '"$INSTDIR\uninstall.exe" /S'
  WriteRegDWORD HKCU "${UNINST_KEY}" "NoModify" 1
  WriteRegDWORD HKCU "${UNINST_KEY}" "NoRepair" 1
SectionEnd

Section "Uninstall"
  SetShellVarContext current
  Delete "$INSTDIR\nevermiss.exe"
  Delete "$INSTDIR\README.txt"
  Delete "$INSTDIR\uninstall.exe"
  RMDir "$INSTDIR"
  Delete "$SMPROGRAMS\NeverMiss\NeverMiss.lnk"
  Delete "$SMPROGRAMS\NeverMiss\NeverMiss web UI.lnk"
  Delete "$SMPROGRAMS\NeverMiss\Uninstall NeverMiss.lnk"
  RMDir "$SMPROGRAMS\NeverMiss"
  DeleteRegKey HKCU "${UNINST_KEY}"
SectionEnd
