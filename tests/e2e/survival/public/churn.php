<?php
// Edits a file in place and runs it, as an rsync or git-pull deploy does while
// validate_timestamps is on: every version wastes the last one's cache memory, and a
// large one fills the cache soon, so OPcache schedules restarts by itself.
$n = (int) ($_GET['n'] ?? 0);
$slot = $n % 8;
$dir = sys_get_temp_dir() . '/php_worker_churn_' . ($_GET['dir'] ?? 'x');
@mkdir($dir, 0777, true);
$file = "$dir/gen$slot.php";
$code = "<?php\nreturn ['version' => $n, 'rows' => [\n";
for ($i = 0; $i < 4000; $i++) {
    $code .= "    ['id' => $i, 'name' => 'row-$n-$i', 'tags' => ['a$i', 'b$i']],\n";
}
$code .= "]];\n";
file_put_contents("$file.tmp", $code);
rename("$file.tmp", $file);
touch($file, time() + $n); // a new mtime each version (OPcache compares whole seconds)
clearstatcache();
$data = require $file;
echo 'churn ', $data['version'], ' ', count($data['rows']);
