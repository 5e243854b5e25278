<?php
echo 'sub page, cwd=', basename(getcwd());
