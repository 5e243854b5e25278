<?php
// Hello world in worker mode.
$handler = static function () {
    echo 'Hello, world!';
};
while (frankenphp_handle_request($handler)) {
}
