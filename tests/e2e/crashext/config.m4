dnl A test extension that crashes its process on purpose (tests/e2e/test_processes.py).
PHP_ARG_ENABLE([pw_crash], [whether to enable the crash test extension], [--enable-pw-crash])
if test "$PHP_PW_CRASH" != "no"; then
  PHP_NEW_EXTENSION(pw_crash, pw_crash.c, $ext_shared)
fi
