<?php
echo 'dir index:', $_SERVER['SCRIPT_NAME'];
