<?php
// Empties this process's OPcache, as a deploy script does, and names the process.
echo json_encode(['pid' => getmypid(), 'reset' => opcache_reset()]);
