# The console and the live view, built by web-ui/build.mjs into <build>/web-ui: where cabind
# looks by default (<bin-dir>/../web-ui). Needs node and the npm packages (`npm ci` at the
# repository root); without them cabind still builds and serves the API, and / says the UI is
# missing. Included, not add_subdirectory'd: a binary dir named web-ui would collide with the output.
find_program(CABIN_NODE node)
if(NOT CABIN_NODE OR NOT EXISTS ${PROJECT_SOURCE_DIR}/node_modules/esbuild
   OR NOT EXISTS ${PROJECT_SOURCE_DIR}/node_modules/@novnc/novnc
   OR NOT EXISTS ${PROJECT_SOURCE_DIR}/node_modules/typescript)
  message(STATUS "web-ui: node or its npm packages missing (run `npm ci`): the web UI is not built")
  return()
endif()

file(GLOB_RECURSE CABIN_WEB_UI_SOURCES CONFIGURE_DEPENDS
     ${PROJECT_SOURCE_DIR}/web-ui/src/* ${PROJECT_SOURCE_DIR}/web-ui/pages/*)
set(CABIN_WEB_UI_STAMP ${CMAKE_BINARY_DIR}/web-ui.stamp)
add_custom_command(
  OUTPUT ${CABIN_WEB_UI_STAMP}
  COMMAND ${CABIN_NODE} ${PROJECT_SOURCE_DIR}/web-ui/build.mjs --out ${CMAKE_BINARY_DIR}/web-ui
  COMMAND ${CMAKE_COMMAND} -E touch ${CABIN_WEB_UI_STAMP}
  DEPENDS ${CABIN_WEB_UI_SOURCES} ${PROJECT_SOURCE_DIR}/web-ui/build.mjs
          ${PROJECT_SOURCE_DIR}/web-ui/tsconfig.json ${PROJECT_SOURCE_DIR}/package-lock.json
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
  COMMENT "Building the web UI (TypeScript, noVNC) into ${CMAKE_BINARY_DIR}/web-ui"
  VERBATIM)
add_custom_target(web-ui ALL DEPENDS ${CABIN_WEB_UI_STAMP})
