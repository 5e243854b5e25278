<?php
error_log('line from error_log ' . ($_GET['tag'] ?? ''));
trigger_error('a notice ' . ($_GET['tag'] ?? ''), E_USER_NOTICE);
trigger_error('a warning ' . ($_GET['tag'] ?? ''), E_USER_WARNING);
echo 'logged';
